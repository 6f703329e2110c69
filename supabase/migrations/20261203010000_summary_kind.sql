-- quota-jobs: a third job kind, summary (a text in, a summary of at most N words out;
-- lib/kinds/summary.ts). A kind is a row here and a line in lib/kinds/index.ts; which plans
-- offer it, and at what cost, is supabase/seed.sql (docs/ADD-A-KIND.md).
insert into public.job_kinds (id, name) values ('summary', 'Summary')
on conflict (id) do update set name = excluded.name;
