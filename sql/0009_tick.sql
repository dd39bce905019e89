-- leasehold migration 0009: a claim that answers only what the caller must act on.
--
-- Additive. claim_due() is claim() with the same arguments, the same decisions (taken by
-- claim() itself, under the lease row locks) and the same row type, but it leaves out the rows
-- that need nothing from the caller: a slot another worker already claimed ('slot-taken'), a
-- slot whose skip is final ('slot-skipped'), and a held job whose skip another caller recorded
-- ('held' with skip_recorded false). Workers that each send every due job therefore get back
-- about their own share of the rows instead of every row, and a second pass over jobs other
-- workers claimed costs almost nothing to transfer. Nothing about exactly-once changes: which
-- worker may run a slot is still decided by claim() alone.
create function leasehold.claim_due(
  p_claims leasehold.slot_claim[], p_holder text, p_holder_key bigint default null
) returns table (
  job            text,
  slot           timestamptz,
  claimed        boolean,
  reason         text,
  token          uuid,
  fence          bigint,
  expires_at     timestamptz,
  previous_slot  timestamptz,
  holder         text,
  holder_fence   bigint,
  holder_slot    timestamptz,
  holder_since   timestamptz,
  skip_recorded  boolean,
  buffered       boolean,
  database_time  timestamptz,
  took_over      boolean
)
language sql volatile
set plan_cache_mode = force_custom_plan
set jit = off
as $$
  select c.*
    from leasehold.claim(p_claims, p_holder, p_holder_key) c
   where c.claimed
      or c.reason not in ('slot-taken', 'slot-skipped', 'held')
      or c.skip_recorded
      or c.buffered;
$$;

insert into leasehold.access (object, level) values ('claim_due', 'client');
