// Mutants of the boundary checks: a function of the schema given another body, as its owner.
import type pg from 'pg';

/** Replaces the plpgsql body of leasehold.`signature` (for example 'check_namespace(text[])') with `body`. */
export async function installMutantFunction(owner: pg.Pool, signature: string, body: string): Promise<void> {
  const { rows } = await owner.query<{ def: string }>(`select pg_get_functiondef($1::regprocedure) as def`, [`leasehold.${signature}`]);
  const def = rows[0]!.def;
  const start = def.indexOf('AS $function$') + 'AS $function$'.length;
  const end = def.lastIndexOf('$function$');
  await owner.query(`${def.slice(0, start)}\n${body}\n${def.slice(end)}`);
}
