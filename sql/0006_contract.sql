-- leasehold migration 0006: reserved for the SQL contract migration developed alongside
-- 0007; this placeholder changes nothing and is replaced by that file when both are merged.
select 1;
