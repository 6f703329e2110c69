/**
 * The erasure covers every row that points at a user, by construction: every foreign key into a
 * table holding a user's rows (auth.users, a table with user_id, and what points at those) is
 * read from pg_constraint and must be listed below with how the erasure covers it, and the
 * catalogue must agree (test/support/erasure-coverage.ts). A table added later with such a key
 * fails here until the erasure handles it; the second test shows the check catching one.
 */
import { describe, expect, test } from "vitest";
import { dbFixture } from "../support/db-fixture.ts";
import { type CoverageList, erasureGaps } from "../support/erasure-coverage.ts";

const db = dbFixture({ fresh: true, noDrift: "never" });
const { admin } = db;

/** Every foreign key into a user's rows, and how private.erase_user_data covers it. */
const COVERAGE: CoverageList = {
  // Ours. Events go before their jobs; a superseded callback stays, without its job id.
  "public.job_events.job_events_job_id_fkey": "deleted",
  // The streamed text of a job's attempt goes with its job.
  "public.job_output_chunks.job_output_chunks_job_id_fkey": "cascade",
  "public.superseded_callbacks.superseded_callbacks_job_id_fkey": "nulled",
  "public.user_plans.user_plans_user_id_fkey": "deleted",
  // A member's memberships go with them (their organization rows: the pool keeps its accounting).
  "public.organization_members.organization_members_user_id_fkey": "deleted",
  // An invitation stays, naming neither its inviter nor whoever accepted it.
  "public.organization_invitations.organization_invitations_invited_by_fkey": "nulled",
  "public.organization_invitations.organization_invitations_accepted_by_fkey": "nulled",
  "private.user_pseudonyms.user_pseudonyms_user_id_fkey": "deleted",
};

describe("every foreign key into a user's rows is covered by the erasure", () => {
  test("the catalogue and the list agree", async () => {
    expect(await erasureGaps(admin, COVERAGE)).toEqual([]);
  });

  test("a table added with a key to a job, one with a user_id, and one pointing at it are each reported, as is a listed key the catalogue contradicts", async () => {
    const c = await admin.connect();
    try {
      await c.query("begin");
      await c.query(`
        create table public.planted_notes (
          id bigint primary key,
          job_id uuid not null references public.generation_jobs (id) on delete cascade
        );
        create table private.planted_scores (id bigint primary key, user_id uuid not null);
        create table public.planted_marks (
          id bigint primary key,
          note_id bigint references public.planted_notes (id)
        );`);
      const gaps = await erasureGaps(c, {
        ...COVERAGE,
        "public.superseded_callbacks.superseded_callbacks_job_id_fkey": "cascade",
      });
      expect(gaps).toEqual([
        "public.planted_marks.planted_marks_note_id_fkey (public.planted_marks → public.planted_notes): not in the erasure's list",
        "public.planted_notes.planted_notes_job_id_fkey (public.planted_notes → public.generation_jobs): not in the erasure's list",
        "public.superseded_callbacks.superseded_callbacks_job_id_fkey (public.superseded_callbacks → public.generation_jobs): listed cascade, is not",
        "private.planted_scores: has user_id, private.erase_user_data does not delete from it",
      ]);
      // Listing a key as covered does not make it so: the catalogue must agree.
      expect(
        await erasureGaps(c, {
          ...COVERAGE,
          "public.planted_notes.planted_notes_job_id_fkey": "deleted",
          "public.planted_marks.planted_marks_note_id_fkey": "nulled",
        }),
      ).toEqual([
        "public.planted_marks.planted_marks_note_id_fkey (public.planted_marks → public.planted_notes): listed nulled, is not on delete set null on nullable columns",
        "public.planted_notes.planted_notes_job_id_fkey (public.planted_notes → public.generation_jobs): listed deleted, private.erase_user_data does not delete from it",
        "private.planted_scores: has user_id, private.erase_user_data does not delete from it",
      ]);
    } finally {
      await c.query("rollback");
      c.release();
    }
    expect(await erasureGaps(admin, COVERAGE)).toEqual([]);
  });

  test("a listed key that no longer exists is reported", async () => {
    expect(
      await erasureGaps(admin, { ...COVERAGE, "public.gone.gone_job_id_fkey": "cascade" }),
    ).toEqual(["public.gone.gone_job_id_fkey: listed, but no such foreign key to a user's rows"]);
  });
});
