import type { MigrationInterface, QueryRunner } from 'typeorm';
import { buildIndexes } from './concurrent-indexes.js';

const TERMINAL = `('done', 'partially_failed', 'failed', 'canceled')`;

/**
 * The wake-up a waiting episode's wait wrote (WaitSteps): signed by the node when the wait began,
 * so the database only moves its due time to now, which the signature does not cover. A NOTIFY
 * alone would wake the bus readers but not the pollers: the library's wake-up event (not signed;
 * with the `integrity` option the nodes ignore it and take the wake-up at their next poll) does.
 */
const WAKE_NODES = `
  CREATE FUNCTION cyclium_wake_wait(episode uuid, channel text, stack text, env text)
  RETURNS void
  LANGUAGE plpgsql SECURITY DEFINER SET search_path FROM CURRENT AS $$
  DECLARE
    woken int;
  BEGIN
    UPDATE cyclium_trigger_requests SET not_before = now()
     WHERE episode_id = episode AND status = 'scheduled' AND opts ->> 'wake' = 'wait'
       AND not_before > now();
    GET DIAGNOSTICS woken = ROW_COUNT;
    IF woken > 0 AND channel IS NOT NULL THEN
      INSERT INTO cyclium_events (channel, event_id, type, payload, published_at, publisher,
                                  source_stack, source_env)
      VALUES (channel, gen_random_uuid()::text, 'cyclium.trigger_requests.pending',
              jsonb_build_object('node', 'database'), now(), 'cyclium', stack, env);
      PERFORM pg_notify(channel, '');
    END IF;
  END $$`;

/**
 * A child's end wakes its parent once all the children it waits for have ended, and only then:
 * one wake-up per fan-in. The trigger's condition reads the child's dedupe key
 * (`child:<parent id>:<key>`, see ChildEpisodes) before its trigger, which may be large: a plain
 * episode's end pays one string comparison. The parent's row lock orders the last children's ends
 * and the parent's own wait (which locks it too), and each statement after it reads a fresh
 * snapshot, so whichever comes last sees the others.
 */
const WAKE_PARENT = `
  CREATE FUNCTION cyclium_wake_parent() RETURNS trigger
  LANGUAGE plpgsql SECURITY DEFINER SET search_path FROM CURRENT AS $$
  DECLARE
    parent cyclium_episodes%ROWTYPE;
  BEGIN
    IF NOT (NEW.trigger_ref ? 'parent') THEN
      RETURN NULL;
    END IF;
    SELECT * INTO parent FROM cyclium_episodes
     WHERE id = (NEW.trigger_ref -> 'parent' ->> 'episodeId')::uuid FOR NO KEY UPDATE;
    IF parent.id IS NULL OR parent.status <> 'waiting'
       OR parent.waiting_for ->> 'kind' IS DISTINCT FROM 'children'
       OR NOT (parent.waiting_for -> 'children' ? NEW.id::text) THEN
      RETURN NULL;
    END IF;
    IF EXISTS (SELECT 1 FROM cyclium_episodes c
                WHERE c.id IN (SELECT jsonb_array_elements_text(
                                        parent.waiting_for -> 'children')::uuid)
                  AND c.status NOT IN ${TERMINAL}) THEN
      RETURN NULL;
    END IF;
    PERFORM cyclium_wake_wait(parent.id, parent.waiting_for ->> 'channel', parent.source_stack,
                              parent.source_env);
    RETURN NULL;
  END $$`;

/**
 * A bus event wakes the episodes waiting for it (ep.waitForEvent): for each set of fields some
 * wait on its channel and type matches on, the event's values of those fields are looked up in the
 * waits' index, so the cost of an event grows with the number of distinct field sets, never with
 * the number of waiting episodes. The shared lock (per channel and type) orders this against a
 * wait being registered, which takes it exclusively: a wait either is visible here, or committed
 * after this event did (and so does not want it).
 */
const MATCH_EVENT = `
  CREATE FUNCTION cyclium_match_event_waits() RETURNS trigger
  LANGUAGE plpgsql SECURITY DEFINER SET search_path FROM CURRENT AS $$
  DECLARE
    shape text[];
    waiter uuid;
  BEGIN
    PERFORM pg_advisory_xact_lock_shared(hashtext('cyclium_event_waits'),
                                         hashtext(NEW.channel || '/' || NEW.type));
    FOR shape IN SELECT s.fields FROM cyclium_event_wait_shapes s
                  WHERE s.channel = NEW.channel AND s.event_type = NEW.type LOOP
      CONTINUE WHEN cardinality(shape) > 0
                AND (jsonb_typeof(NEW.payload) IS DISTINCT FROM 'object'
                     OR NOT (NEW.payload ?& shape));
      FOR waiter IN
        UPDATE cyclium_event_waits w
           SET event_row = NEW.id,
               event = jsonb_build_object('eventId', NEW.event_id, 'type', NEW.type,
                                          'payload', NEW.payload,
                                          'publishedAt', NEW.published_at)
         WHERE w.channel = NEW.channel AND w.event_type = NEW.type AND w.event_row IS NULL
           AND w.match = (SELECT coalesce(jsonb_object_agg(f, NEW.payload -> f), '{}'::jsonb)
                            FROM unnest(shape) f)
        RETURNING w.episode_id
      LOOP
        PERFORM cyclium_wake_wait(waiter, NEW.channel, NEW.source_stack, NEW.source_env);
      END LOOP;
    END LOOP;
    RETURN NULL;
  END $$`;

/**
 * Waits inside an episode: signals (`Episodes.signal`, `ep.waitForSignal`), bus events
 * (`ep.waitForEvent`) and child episodes (`ep.startChild`, `ep.waitForChildren`). A waiting
 * episode is `waiting` (no slot, no claim) with `waiting_for` saying what for, and a `scheduled`
 * wake-up due at its deadline, which a signal, a matching event or its last child's end moves to
 * now. `result` is what an episode's method returned (`Convergence.result`). A child names its
 * parent in its trigger (`trigger_ref.parent`), so nothing on the insert path changes.
 */
export class CycliumWaits1764400000022 implements MigrationInterface {
  name = 'CycliumWaits1764400000022';

  async up(runner: QueryRunner): Promise<void> {
    await runner.query(
      `ALTER TABLE cyclium_episodes ADD COLUMN waiting_for jsonb, ADD COLUMN result jsonb`,
    );
    await runner.query(`
      CREATE TABLE cyclium_signals (
        id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
        episode_id uuid NOT NULL,
        name text NOT NULL,
        payload jsonb,
        sent_by text,
        sent_at timestamptz NOT NULL DEFAULT now(),
        delivered_at timestamptz,
        delivered_step integer
      )`);
    // An episode's signals: the next undelivered one of a name, and retention's delete.
    await runner.query(
      `CREATE INDEX cyclium_signals_episode ON cyclium_signals (episode_id, name, id)`,
    );
    await runner.query(`
      CREATE TABLE cyclium_event_waits (
        episode_id uuid NOT NULL,
        step_no integer NOT NULL,
        channel text NOT NULL,
        event_type text NOT NULL,
        fields text[] NOT NULL,
        match jsonb NOT NULL,
        event_row bigint,
        event jsonb,
        created_at timestamptz NOT NULL DEFAULT now(),
        PRIMARY KEY (episode_id, step_no)
      )`);
    await runner.query(
      `CREATE INDEX cyclium_event_waits_match ON cyclium_event_waits ` +
        `(channel, event_type, match) WHERE event_row IS NULL`,
    );
    await runner.query(`
      CREATE TABLE cyclium_event_wait_shapes (
        channel text NOT NULL,
        event_type text NOT NULL,
        fields text[] NOT NULL,
        PRIMARY KEY (channel, event_type, fields)
      )`);
    await runner.query(WAKE_NODES);
    await runner.query(WAKE_PARENT);
    await runner.query(MATCH_EVENT);
    await runner.query(`
      CREATE TRIGGER cyclium_episodes_wake_parent AFTER UPDATE OF status ON cyclium_episodes
        FOR EACH ROW
        WHEN (NEW.status IN ${TERMINAL} AND OLD.status IS DISTINCT FROM NEW.status
              AND NEW.dedupe_key LIKE 'child:%')
        EXECUTE FUNCTION cyclium_wake_parent()`);
    await runner.query(`
      CREATE TRIGGER cyclium_events_match_waits AFTER INSERT ON cyclium_events
        FOR EACH ROW
        WHEN (NEW.type NOT LIKE 'cyclium.%' AND NEW.type NOT LIKE 'episode.%')
        EXECUTE FUNCTION cyclium_match_event_waits()`);
    await buildIndexes(runner, ['cyclium_episodes'], INDEXES);
  }

  async down(runner: QueryRunner): Promise<void> {
    for (const [name] of INDEXES) await runner.query(`DROP INDEX IF EXISTS ${name}`);
    await runner.query(`DROP TRIGGER cyclium_events_match_waits ON cyclium_events`);
    await runner.query(`DROP TRIGGER cyclium_episodes_wake_parent ON cyclium_episodes`);
    await runner.query(`DROP FUNCTION cyclium_match_event_waits()`);
    await runner.query(`DROP FUNCTION cyclium_wake_parent()`);
    await runner.query(`DROP FUNCTION cyclium_wake_wait(uuid, text, text, text)`);
    await runner.query(`DROP TABLE cyclium_event_wait_shapes`);
    await runner.query(`DROP TABLE cyclium_event_waits`);
    await runner.query(`DROP TABLE cyclium_signals`);
    await runner.query(`ALTER TABLE cyclium_episodes DROP COLUMN waiting_for, DROP COLUMN result`);
  }
}

/** A parent's children, for the cancel that reaches them and the operations page. */
const INDEXES: ReadonlyArray<[string, string]> = [
  [
    'cyclium_episodes_parent',
    `cyclium_episodes (((trigger_ref -> 'parent' ->> 'episodeId'))) WHERE trigger_ref ? 'parent'`,
  ],
];
