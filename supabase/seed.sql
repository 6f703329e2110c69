-- The plans. Idempotent: `npm run dev` runs it on every start.
insert into public.plans (id, name, period, units_per_period, max_active_jobs, max_output_tokens) values
  ('free', 'Free', 'day', 1, 1, 512),
  ('pro', 'Pro', 'month', 100, 3, 2048)
on conflict (id) do update set
  name = excluded.name,
  period = excluded.period,
  units_per_period = excluded.units_per_period,
  max_active_jobs = excluded.max_active_jobs,
  max_output_tokens = excluded.max_output_tokens;
