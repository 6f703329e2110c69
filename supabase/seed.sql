-- The plans. Idempotent: `npm run dev` runs it on every start.
-- A job the provider already billed (a running cancel, a failure or a queued cancel after a
-- consumed attempt) gets its unit back up to max_paid_refunds times a period: free, once a day
-- (its one unit); pro, 20 times a month (a fifth of its units; beyond that the billed job's
-- unit stays spent).
-- team meters tokens: 2,000,000 a month; each job holds its prompt's tokens plus 2,048 and keeps
-- what the provider consumed (a running cancel keeps what streamed, so it needs no bound).
-- pro's max_output_tokens, 8,000 (a long document, about 6,000 words), streams within the
-- worker's 270 s model timeout at 30 tokens a second; free keeps 512; team keeps 2,048.
-- economy runs on OpenAI's flex tier, billed at Batch rates (half the standard price), with
-- flex's slower answers kept to a 2,048-token bound: twice pro's jobs and refunded cancels (200
-- and 40 a month) then bill at most pro's worst case at standard rates. It never falls back to
-- the standard tier (that would bill at full price): a job waits for flex capacity within its
-- max age, then fails capacity_unavailable, refunded. Flex is offered on some models only
-- (public.model_tiers): economy names gpt-5.4-mini at low reasoning effort. The other plans name no
-- model: they run on the deployment's OPENAI_MODEL (a reasoning model by default). team sends
-- reasoning effort none: a token plan's cancel then captures what streamed, where hidden
-- reasoning cut short would cost the attempt's whole bound.
insert into public.plans (id, name, period, units_per_period, max_active_jobs, max_output_tokens, max_paid_refunds, meter, service_tier, flex_fallback_after_seconds, model, reasoning_effort) values
  ('free', 'Free', 'day', 1, 1, 512, 1, 'jobs', 'default', null, null, null),
  ('pro', 'Pro', 'month', 100, 3, 8000, 20, 'jobs', 'default', null, null, null),
  ('team', 'Team', 'month', 2000000, 3, 2048, null, 'tokens', 'default', null, null, 'none'),
  ('economy', 'Economy', 'month', 200, 3, 2048, 40, 'jobs', 'flex', null, 'gpt-5.4-mini', 'low')
on conflict (id) do update set
  name = excluded.name,
  period = excluded.period,
  units_per_period = excluded.units_per_period,
  max_active_jobs = excluded.max_active_jobs,
  max_output_tokens = excluded.max_output_tokens,
  max_paid_refunds = excluded.max_paid_refunds,
  meter = excluded.meter,
  service_tier = excluded.service_tier,
  flex_fallback_after_seconds = excluded.flex_fallback_after_seconds,
  model = excluded.model,
  reasoning_effort = excluded.reasoning_effort;

-- What each plan offers (public.plan_kinds), and what a job of each kind holds on a job plan.
-- Every plan offers a document at 1 unit. An extraction (a text and a JSON Schema in, a JSON value
-- out) costs 2 on pro and economy: its model input carries the schema as well as the text, and it
-- is the kind a client scripts in bulk; team offers it too (a token plan holds tokens whatever the
-- kind, so its units are not read). Free does not offer extractions. A summary (a text in, at
-- most N words out) costs 1 on pro and is offered on team.
insert into public.plan_kinds (plan_id, kind, units) values
  ('free', 'document', 1),
  ('pro', 'document', 1),
  ('team', 'document', 1),
  ('economy', 'document', 1),
  ('pro', 'extract', 2),
  ('team', 'extract', 2),
  ('economy', 'extract', 2),
  ('pro', 'summary', 1),
  ('team', 'summary', 1)
on conflict (plan_id, kind) do update set units = excluded.units;
