-- The part of Supabase Realtime's `realtime` schema that Broadcast uses, for a plain PostgreSQL:
-- the table `realtime.messages`, `realtime.topic()` and `realtime.send()`, as Realtime's own
-- tenant migrations leave them today (supabase/realtime, lib/realtime/tenants/repo/migrations,
-- up to 20260707120000_restrict_realtime_schema), so RLS policies written for a real project
-- work here unchanged. Postgres Changes (realtime.subscription and its functions) is left out:
-- this app does not use it. Used by the tests and the local stack only; a real Supabase project
-- already has all of it. Applied once per database, before the migrations (dev/postgres/migrate.ts).

do $$
begin
  if not exists (select 1 from pg_roles where rolname = 'supabase_realtime_admin') then
    create role supabase_realtime_admin with noinherit nologin noreplication;
  end if;
end
$$;
grant supabase_realtime_admin to postgres;

create schema if not exists realtime;

-- 20241030150047_messages_partitioning, 20241108114728_messages_using_uuid,
-- 20260514120000_add_binary_payload_to_messages: one partition a day, made by Realtime itself
-- (Tenants.create_messages_partitions: yesterday to three days ahead; here dev/realtime/partitions.ts).
create table realtime.messages (
  topic text not null,
  extension text not null,
  payload jsonb,
  event text,
  private boolean default false,
  updated_at timestamp without time zone not null default now(),
  inserted_at timestamp without time zone not null default now(),
  id uuid not null default gen_random_uuid(),
  binary_payload bytea,
  primary key (id, inserted_at)
) partition by range (inserted_at);
alter table realtime.messages
  add constraint messages_payload_exclusive check (payload is null or binary_payload is null) not valid;
-- 20250905041441_create_messages_replay_index
create index messages_inserted_at_topic_index on realtime.messages (inserted_at desc, topic)
  where extension = 'broadcast' and private is true;
alter table realtime.messages enable row level security;

-- 20240523004032_redefine_authorization_tables: the topic the policies see.
create or replace function realtime.topic() returns text as $$
select nullif(current_setting('realtime.topic', true), '')::text;
$$ language sql stable;

-- 20260605120000_rename_broadcast_send_warning: realtime.send as defined today. A failed insert
-- (no partition for today, a policy refusing the caller) is a warning, never the caller's error.
create or replace function realtime.send(payload jsonb, event text, topic text, private boolean default true) returns void
as $$
declare
  generated_id uuid;
  final_payload jsonb;
begin
  begin
    generated_id := gen_random_uuid();

    -- Check if payload has an 'id' key, if not, add the generated UUID
    if payload ? 'id' then
      final_payload := payload;
    else
      final_payload := jsonb_set(payload, '{id}', to_jsonb(generated_id));
    end if;

    -- Set the topic configuration
    execute format('SET LOCAL realtime.topic TO %L', topic);

    insert into realtime.messages (id, payload, event, topic, private, extension)
    values (generated_id, final_payload, event, topic, private, 'broadcast');
  exception
    when others then
      raise warning 'WarnSendingBroadcastMessage: %', SQLERRM;
  end;
end;
$$
language plpgsql;

-- 20231204144023_set_required_grants, 20240523004032_redefine_authorization_tables,
-- 20241030150047_messages_partitioning, 20260707120000_restrict_realtime_schema.
grant usage on schema realtime to postgres, anon, authenticated, service_role;
grant select, insert, update on realtime.messages to postgres, anon, authenticated, service_role;
grant all privileges on schema realtime to supabase_realtime_admin;
alter table realtime.messages owner to supabase_realtime_admin;
alter function realtime.topic() owner to supabase_realtime_admin;
alter function realtime.send(jsonb, text, text, boolean) owner to supabase_realtime_admin;
