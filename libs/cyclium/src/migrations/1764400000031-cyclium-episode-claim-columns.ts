import type { MigrationInterface, QueryRunner } from 'typeorm';

/** A key `episode:<uuid>` (claimKeyOf), lowercase as the id prints. */
const EPISODE_KEY = `'^episode:[0-9a-f]{8}(-[0-9a-f]{4}){3}-[0-9a-f]{12}$'`;

/**
 * plpgsql: `ep` := the id of the episode row a claim key (NEW.dedupe_key) names: `episode:<id>`
 * for an episode without a dedupe key, else the live (unarchived) episode whose scoped dedupe key
 * is the key (claimKeyOf). Any other key (a host's own WorkClaims key, a key whose episode is not
 * inserted yet) names none: NULL, or an id NAMED finds no row for. Each branch reads by an index.
 */
const FIND = `
    IF NEW.dedupe_key ~ ${EPISODE_KEY} THEN
      ep := substr(NEW.dedupe_key, 9)::uuid;
    ELSE
      SELECT e.id INTO ep FROM cyclium_episodes e
       WHERE e.dedupe_key = NEW.dedupe_key AND e.archived_at IS NULL;
    END IF;`;

/** SQL: the episode row `e` is the one FIND named. */
const NAMED = `e.id = ep AND (e.dedupe_key IS NULL OR e.dedupe_key = NEW.dedupe_key)`;

/** The generation a claim row `r` holds, as the episode row's columns spell it. */
const GENERATION = (r: string) =>
  `(${r}.owner_node, ${r}.fence, ${r}.state, ${r}.lease_until, ${r}.attempt)`;
/** The same, as the episode row `r` holds it in its columns. */
const HELD = (r: string) =>
  `(${r}.claim_owner, ${r}.claim_fence, ${r}.claim_state, ${r}.claim_lease_until, ` +
  `${r}.claim_attempt)`;

/**
 * Before a claim row is written: whether the episode row's columns still hold what the claim table
 * held (or already what this write writes: a begin inserts both, its row visible here), and when
 * they do not (the episode was claimed in its row alone), the row's claim decides. A
 * write of the generation the table held (renew, release, finish) is skipped: that holder lost the
 * key, and its statement sees no row, as for a fence that moved. An acquire (insert or takeover)
 * is skipped, so busy, while the row's claim is live, and otherwise goes on with a fence above the
 * row's, so fences only rise whichever shape took the key last. The read is not locked: the mirror
 * after the write re-checks on the row as it is then.
 */
const HONOUR = `
  CREATE FUNCTION cyclium_claims_honour_episode_rows() RETURNS trigger
  LANGUAGE plpgsql AS $$
  DECLARE
    ep uuid;
    row_claim record;
  BEGIN${FIND}
    SELECT e.claim_owner, e.claim_fence, e.claim_state, e.claim_lease_until, e.claim_attempt
      INTO row_claim FROM cyclium_episodes e WHERE ${NAMED};
    IF NOT FOUND OR row_claim.claim_fence IS NULL
       OR ${HELD('row_claim')} = ${GENERATION('NEW')} THEN
      RETURN NEW;
    END IF;
    IF TG_OP = 'UPDATE' AND row_claim.claim_owner = OLD.owner_node
       AND row_claim.claim_fence = OLD.fence THEN
      RETURN NEW;
    END IF;
    IF TG_OP = 'UPDATE' AND NEW.owner_node = OLD.owner_node AND NEW.fence = OLD.fence THEN
      RETURN NULL;
    END IF;
    IF row_claim.claim_state = 'claimed' AND row_claim.claim_lease_until > now() THEN
      RETURN NULL;
    END IF;
    NEW.fence := greatest(NEW.fence, row_claim.claim_fence + 1);
    RETURN NEW;
  END $$`;

/**
 * After a claim row is written: the episode row's columns take its generation, when they hold the
 * generation the write replaced, none yet, this one already, or a free claim below the new fence.
 * Anything else is a claim taken in the episode row after the check before the write (a race with
 * a row claim): the write fails, and its statement with it, rather than two holders.
 */
const MIRROR = `
  CREATE FUNCTION cyclium_claims_mirror_episode_rows() RETURNS trigger
  LANGUAGE plpgsql AS $$
  DECLARE
    ep uuid;
  BEGIN${FIND}
    IF ep IS NULL THEN
      RETURN NULL;
    END IF;
    UPDATE cyclium_episodes e
       SET claim_owner = NEW.owner_node, claim_fence = NEW.fence, claim_state = NEW.state,
           claim_lease_until = NEW.lease_until, claim_attempt = NEW.attempt
     WHERE ${NAMED}
       AND ${HELD('e')} IS DISTINCT FROM ${GENERATION('NEW')}
       AND (e.claim_fence IS NULL
            OR (e.claim_owner = OLD.owner_node AND e.claim_fence = OLD.fence)
            OR (e.claim_owner = NEW.owner_node AND e.claim_fence = NEW.fence)
            OR (e.claim_fence < NEW.fence
                AND (e.claim_state <> 'claimed' OR e.claim_lease_until <= now())));
    IF NOT FOUND AND EXISTS (
         SELECT 1 FROM cyclium_episodes e
          WHERE ${NAMED}
            AND ${HELD('e')} IS DISTINCT FROM ${GENERATION('NEW')})
    THEN
      RAISE EXCEPTION 'claim % was taken in its episode row meanwhile', NEW.dedupe_key
        USING ERRCODE = '40001';
    END IF;
    RETURN NULL;
  END $$`;

const TRIGGERS = `
  CREATE TRIGGER cyclium_claims_honour_episode_rows
    BEFORE INSERT OR UPDATE ON cyclium_work_claims
    FOR EACH ROW EXECUTE FUNCTION cyclium_claims_honour_episode_rows();
  CREATE TRIGGER cyclium_claims_mirror_episode_rows
    AFTER INSERT OR UPDATE ON cyclium_work_claims
    FOR EACH ROW EXECUTE FUNCTION cyclium_claims_mirror_episode_rows()`;

/** The claims of unfinished episodes written before the triggers, copied once. */
const BACKFILL = `
  UPDATE cyclium_episodes e
     SET claim_owner = c.owner_node, claim_fence = c.fence, claim_state = c.state,
         claim_lease_until = c.lease_until, claim_attempt = c.attempt
    FROM cyclium_work_claims c
   WHERE c.dedupe_key = coalesce(e.dedupe_key, 'episode:' || e.id)
     AND e.status NOT IN ('done', 'partially_failed', 'failed', 'canceled')
     AND e.archived_at IS NULL AND e.claim_fence IS NULL`;

/**
 * The expand half of an episode's claim moving into its own row (lighter writes: one row per
 * episode instead of two). This release still claims in cyclium_work_claims, as the previous one
 * does; the episode row gets the claim as columns, kept equal to the claim row by the database
 * itself in the claim's own transaction, whichever release wrote it. The contract half claims in
 * the episode row alone. Every writer of cyclium_work_claims honours such a claim through the check
 * before each claim write, a node of the previous release included (the migrations run before any
 * node that claims in rows boots), so the contract can roll beside it.
 *
 * Nullable columns without a default and the triggers are catalog changes; the copy touches only
 * the unfinished episodes that hold a claim. Triggers come first, so a claim written while the
 * copy runs is mirrored by them and the copy skips its row (`claim_fence IS NULL`). The fill
 * factor leaves room on new pages for a renewal to update the row in place (HOT).
 */
export class CycliumEpisodeClaimColumns1764400000031 implements MigrationInterface {
  name = 'CycliumEpisodeClaimColumns1764400000031';

  async up(runner: QueryRunner): Promise<void> {
    await runner.query(
      `ALTER TABLE cyclium_episodes ADD COLUMN claim_owner text, ADD COLUMN claim_fence bigint,
         ADD COLUMN claim_state text, ADD COLUMN claim_lease_until timestamptz,
         ADD COLUMN claim_attempt int, SET (fillfactor = 90)`,
    );
    await runner.query(HONOUR);
    await runner.query(MIRROR);
    await runner.query(TRIGGERS);
    await runner.query(BACKFILL);
  }

  async down(runner: QueryRunner): Promise<void> {
    await runner.query(`DROP TRIGGER cyclium_claims_mirror_episode_rows ON cyclium_work_claims`);
    await runner.query(`DROP TRIGGER cyclium_claims_honour_episode_rows ON cyclium_work_claims`);
    await runner.query(`DROP FUNCTION cyclium_claims_mirror_episode_rows()`);
    await runner.query(`DROP FUNCTION cyclium_claims_honour_episode_rows()`);
    await runner.query(
      `ALTER TABLE cyclium_episodes DROP COLUMN claim_owner, DROP COLUMN claim_fence,
         DROP COLUMN claim_state, DROP COLUMN claim_lease_until, DROP COLUMN claim_attempt,
         RESET (fillfactor)`,
    );
  }
}
