-- leasehold migration 0008: placeholder (indexes and read views land here).
select 1;
