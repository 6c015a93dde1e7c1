/**
 * Test-only SQL the soak installs in its template database: an audit table fed by row triggers
 * on the tables whose history the checker judges (every insert, every change of the columns that
 * say where a row stands, every delete, each with `clock_timestamp()` and its transaction), and
 * the side-effect tables the nodes' actors and output adapter write.
 */
export const AUDIT_SQL = `
CREATE TABLE fs_audit (
  id bigserial PRIMARY KEY,
  at timestamptz NOT NULL DEFAULT clock_timestamp(),
  tx xid8 NOT NULL DEFAULT pg_current_xact_id(),
  tbl text NOT NULL,
  op text NOT NULL,
  key text,
  status text,
  old_status text,
  row jsonb NOT NULL
);

CREATE TABLE fs_effects (
  id bigserial PRIMARY KEY,
  at timestamptz NOT NULL DEFAULT clock_timestamp(),
  episode_id uuid NOT NULL,
  step_no int NOT NULL,
  kind text NOT NULL,
  node text NOT NULL
);

CREATE TABLE fs_deliveries (
  id bigserial PRIMARY KEY,
  at timestamptz NOT NULL DEFAULT clock_timestamp(),
  output_id text NOT NULL,
  episode_id uuid,
  node text NOT NULL,
  env text,
  stack text,
  attempt int
);

-- TG_ARGV[0] names the key column; the other arguments are the columns whose change is logged.
CREATE FUNCTION fs_audit_row() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
  new_row jsonb;
  old_row jsonb;
  changed boolean := false;
BEGIN
  IF TG_OP <> 'INSERT' THEN old_row := to_jsonb(OLD); END IF;
  IF TG_OP <> 'DELETE' THEN new_row := to_jsonb(NEW); END IF;
  IF TG_OP = 'UPDATE' THEN
    FOR i IN 1 .. TG_NARGS - 1 LOOP
      IF (new_row -> TG_ARGV[i]) IS DISTINCT FROM (old_row -> TG_ARGV[i]) THEN changed := true; END IF;
    END LOOP;
    IF NOT changed THEN RETURN NULL; END IF;
  END IF;
  INSERT INTO fs_audit (tbl, op, key, status, old_status, row)
  VALUES (TG_TABLE_NAME, TG_OP, coalesce(new_row, old_row) ->> TG_ARGV[0], new_row ->> 'status', old_row ->> 'status',
          coalesce(new_row, old_row));
  RETURN NULL;
END $$;

-- The db_error fault: a BEFORE INSERT trigger on cyclium_episodes with the SQLSTATE to raise.
CREATE FUNCTION fs_fault() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  RAISE EXCEPTION 'fault injected by the soak (SQLSTATE %)', TG_ARGV[0] USING ERRCODE = TG_ARGV[0];
END $$;

CREATE TRIGGER fs_audit AFTER INSERT OR UPDATE OR DELETE ON cyclium_episodes
  FOR EACH ROW EXECUTE FUNCTION fs_audit_row('id', 'status', 'phase', 'owner_node', 'attempts', 'archived_at',
                                             'error_class');
CREATE TRIGGER fs_audit AFTER INSERT OR UPDATE OR DELETE ON cyclium_episode_steps
  FOR EACH ROW EXECUTE FUNCTION fs_audit_row('episode_id');
CREATE TRIGGER fs_audit AFTER INSERT OR UPDATE OR DELETE ON cyclium_outputs
  FOR EACH ROW EXECUTE FUNCTION fs_audit_row('episode_id', 'status');
CREATE TRIGGER fs_audit AFTER INSERT OR UPDATE OR DELETE ON cyclium_trigger_requests
  FOR EACH ROW EXECUTE FUNCTION fs_audit_row('episode_id', 'status');
CREATE TRIGGER fs_audit AFTER INSERT OR UPDATE OR DELETE ON cyclium_events
  FOR EACH ROW EXECUTE FUNCTION fs_audit_row('event_id');
`;
