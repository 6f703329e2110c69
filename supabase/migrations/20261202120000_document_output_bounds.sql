-- Output bounds for documents. The worker now has a 300 s function (Fluid compute's default)
-- and a 270 s model timeout instead of 60 s and 45 s, so one attempt can stream a long document:
-- the pro and team plans' bound goes from 2,048 to 8,000 completion tokens (about 6,000 English
-- words). 8,000 tokens stream in 270 s at 30 tokens a second, slower than the models this app
-- calls usually stream. Free stays at 512. Only a bound still at the old value is raised, so an
-- operator's own choice stays; supabase/seed.sql says the same for new databases.
update public.plans set max_output_tokens = 8000
where id in ('pro', 'team') and max_output_tokens = 2048;
