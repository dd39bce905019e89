-- The rows of the pre-release schema set aside by 1_set_aside.sql, copied into the baseline's
-- tables column by column (the columns both have; a column the pre-release version did not have
-- takes its default), with the triggers off so that run counts and job revisions are copied, not
-- counted again. Identity and serial sequences continue after the copied ids. leasehold.access
-- and leasehold.migrations are the baseline's own.
do $$
declare
  t record;
  v_cols text;
  v_seq record;
begin
  for t in select c.relname from pg_class c
            where c.relnamespace = 'leasehold'::regnamespace and c.relkind = 'r'
              and c.relname not in ('access', 'migrations')
              and to_regclass(format('leasehold_prerelease.%I', c.relname)) is not null
            order by c.relname loop
    select string_agg(quote_ident(a.attname), ', ' order by a.attnum) into v_cols
      from pg_attribute a
     where a.attrelid = format('leasehold.%I', t.relname)::regclass and a.attnum > 0 and not a.attisdropped
       and a.attgenerated = ''
       and exists (select 1 from pg_attribute o
                    where o.attrelid = format('leasehold_prerelease.%I', t.relname)::regclass
                      and o.attname = a.attname and o.attnum > 0 and not o.attisdropped);
    execute format('alter table leasehold.%I disable trigger user', t.relname);
    execute format('insert into leasehold.%I (%s) overriding system value select %s from leasehold_prerelease.%I',
                   t.relname, v_cols, v_cols, t.relname);
    execute format('alter table leasehold.%I enable trigger user', t.relname);
  end loop;
  for v_seq in select s.oid::regclass as seq, a.attname, c.relname
                 from pg_depend d join pg_class s on s.oid = d.objid and s.relkind = 'S'
                 join pg_class c on c.oid = d.refobjid join pg_attribute a on a.attrelid = c.oid and a.attnum = d.refobjsubid
                where c.relnamespace = 'leasehold'::regnamespace and d.deptype in ('a', 'i') loop
    execute format('select setval(%L, greatest(coalesce((select max(%I) from leasehold.%I), 0), 1), (select count(*) > 0 from leasehold.%I))',
                   v_seq.seq, v_seq.attname, v_seq.relname, v_seq.relname);
  end loop;
  if to_regclass('leasehold_prerelease.job_revisions') is not null then
    perform setval('leasehold.job_revisions', (select last_value from leasehold_prerelease.job_revisions),
                   (select is_called from leasehold_prerelease.job_revisions));
  end if;
end $$;

drop schema leasehold_prerelease cascade;
