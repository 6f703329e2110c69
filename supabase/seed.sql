-- The plans. Idempotent: `npm run dev` runs it on every start.
insert into public.plans (id, name, period, units_per_period, max_active_jobs) values
  ('free', 'Free', 'day', 1, 1),
  ('pro', 'Pro', 'month', 100, 3)
on conflict (id) do update set
  name = excluded.name,
  period = excluded.period,
  units_per_period = excluded.units_per_period,
  max_active_jobs = excluded.max_active_jobs;
