/*
 * One organization's pool, two of its members racing on it, and their jobs' endings, for spin.
 * The transitions (one inline per SQL function) come from pool-transitions.pml, generated from
 * spec/pool.ts; spec/check.ts runs it (`model: "pool"`); docs/RELIABILITY.md explains the bounds.
 *
 * Each member sends TRIES enqueue requests at once; the pool has room for fewer jobs than they
 * ask for, and each member has a cap (CAP0, CAP1; NOCAP for none) and the plan's active bound.
 * Every job then ends by whichever of its endings comes first: its worker's completion (a job
 * plan keeps the hold, a metered one captures what was spent and releases the rest) or failure,
 * the user's cancel, the sweeper, or the failure callback, which QStash may call again and again.
 *
 * Why one SQL call may be one atomic step here:
 *
 * - enqueue_job is two steps, as the SQL is two statements under one lock. The first takes the
 *   member's advisory lock (pg_advisory_xact_lock, held to the commit) and makes the one read
 *   (the pool's and the member's counters, the member's active jobs, in one snapshot); its checks
 *   refuse on what it read. Between the lock and the read nothing happens that another
 *   transaction can see, so they are one step. The second is private.enqueue_in_organization's
 *   one statement: the pool row's upsert, guarded by the limit, then the member row's, guarded by
 *   the cap, then the job, then the commit that releases the lock. Between the two steps any
 *   other actor may move: that is the race the statement's guards exist for.
 * - Every other read and write of these transactions is of a row they have locked (the job's,
 *   then the pool's, then the member's; a guarded upsert or update that waited for a row's lock
 *   is evaluated on the version its holder committed, as read committed re-reads a row it waited
 *   for), and each keeps its locks to its commit: strict two-phase locking, so they are
 *   equivalent to running one at a time in the order of their commits. That makes each of them
 *   one step: the reserving statement; each ending (two endings of one job take turns on its
 *   row, and the later sees the first's final status); and a sweep, which ends its whole batch in
 *   one transaction (a job another transaction holds is skipped, `skip locked`, as is one the
 *   sweeper's rule does not find). The read alone takes no lock: it sees the last commit. A
 *   transaction Postgres aborts (a raise, a deadlock's victim) keeps nothing: no step at all.
 * - Left out: a job's attempts, leases, messages and the amounts an ending captures are the
 *   one-job model's (job.pml, from the same SQL); here a metered ending may capture any amount up
 *   to the hold, which includes each one the SQL can. The erasure and a member's removal end jobs
 *   by the cancel's rule (private.end_with_refund); neither is an actor here.
 */

#define MEMBERS 2
#ifndef TRIES
#define TRIES 2         /* enqueue requests each member sends at once */
#endif
#ifndef HOLD
#define HOLD 2          /* what one job holds (a job plan's kind units, a metered plan's hold) */
#endif
#ifndef LIMIT
#define LIMIT 5         /* the organization's plan's units_per_period: two holds and a bit */
#endif
#define NOCAP 255       /* organization_members.cap is null */
#ifndef CAP0
#define CAP0 4          /* two holds: the active bound refuses this member's second job first */
#endif
#ifndef CAP1
#define CAP1 3          /* one hold, and a second only after the first captured at most 1 */
#endif
#ifndef MAX_ACTIVE
#define MAX_ACTIVE 1    /* the plan's max_active_jobs, per member in the organization */
#endif
#ifndef BOUND
#define BOUND 1         /* the organization's plan's bound of refunds after spend (refund_bound) */
#endif
#define JOBS (MEMBERS * TRIES)
#define OWNER(j) ((j) / TRIES)
#define CAP(m) ((m) == 0 -> CAP0 : CAP1)
#define ACTIVE(s) ((s) == S_QUEUED || (s) == S_RUNNING)
#define FINAL(s) ((s) == S_SUCCEEDED || (s) == S_FAILED || (s) == S_CANCELED)

/* the rows (model variables the generated transitions read and write) */
byte pool;              /* organization_usage.units_used */
byte mu[MEMBERS];       /* organization_member_usage.units_used, per member */
byte paid;              /* organization_usage.paid_refunds */
bool metered;           /* the organization's plan: metered (tokens or money) or a job plan */
byte st[JOBS];          /* generation_jobs.status; job j is member OWNER(j)'s */
byte capt;              /* scratch: what the settling ending captures (0 between steps) */
bool lock[MEMBERS];     /* the member's enqueue advisory lock */

/* ghosts: what the invariants are stated in */
byte kept[MEMBERS];     /* what each member's ended jobs captured (a job's own is forgotten) */
byte settled[JOBS];     /* endings that settled the job's hold */
byte done;              /* requests answered (the enqueue's response) */
byte open;              /* jobs queued or running, recounted by invariants() */
byte k;                 /* scratch of invariants() and count_active(), 0 between steps */
byte nact[MEMBERS];     /* scratch: each member's active jobs */

#include "pool-transitions.pml"

/*
 * After every step: the pool never over its limit; no member over their cap or the active bound;
 * no drift (the pool is the sum of its members' rows, and each member's row the sum of their
 * jobs' holds while active and captures once final); each job's hold settled exactly once, by
 * its ending; the refunds after spend under the organization's bound.
 */
inline invariants() {
  d_step {
    assert(pool <= LIMIT);
    assert(pool == mu[0] + mu[1]);
    assert(paid <= BOUND);
    k = 0; open = 0;
    do
    :: k < JOBS ->
       if :: ACTIVE(st[k]) -> nact[OWNER(k)]++; open++ :: else fi;
       assert(settled[k] == (FINAL(st[k]) -> 1 : 0));
       k++
    :: else -> break
    od;
    assert(mu[0] == nact[0] * HOLD + kept[0] && mu[1] == nact[1] * HOLD + kept[1]);
    assert(CAP0 == NOCAP || mu[0] <= CAP0);
    assert(CAP1 == NOCAP || mu[1] <= CAP1);
    assert(nact[0] <= MAX_ACTIVE && nact[1] <= MAX_ACTIVE);
    k = 0; nact[0] = 0; nact[1] = 0
  }
}

/* The member's active jobs in the organization, as the read counts them. */
inline count_active(m, n) {
  d_step {
    k = 0; n = 0;
    do
    :: k < JOBS -> if :: OWNER(k) == m && ACTIVE(st[k]) -> n++ :: else fi; k++
    :: else -> break
    od;
    k = 0
  }
}

/* Some job (any of them: its owner, a worker, QStash or the sweeper names it by id). */
inline any_job(j) {
  j = 0;
  do
  :: j < JOBS - 1 -> j++
  :: break
  od
}

/* Whether the ending is after provider spend: the pool model lets every ending be either. */
inline spend(sp) {
  if :: sp = true :: sp = false fi
}

/* The request is answered (its HTTP response; the liveness claim counts them). */
inline answer() {
  done++; out = 0; sp = false
}

/*
 * POST /api/jobs with the organization: the lock and the read, then the reserving statement;
 * then the job's worker: QStash delivers its message and a worker claims the job (or the message
 * is lost, and someone else ends the job), then the model's answer, or the worker's death.
 */
proctype Request(byte m; byte j) {
  byte out, p, u, n;
  bool sp;
  atomic {
#ifndef NO_USER_LOCK
    !lock[m] -> lock[m] = true;
#endif
    p = pool; u = mu[m]; count_active(m, n);
    enqueue_job(j, m, p, u, n, out); invariants();
    p = 0; u = 0; n = 0;
    if
    :: out == O_RESERVE -> out = 0
    :: else -> lock[m] = false; answer(); goto gone
    fi
  };
  atomic {
    enqueue_in_organization(j, m, pool, mu[m], out); lock[m] = false; invariants();
    /* enqueue_in_organization raises when the member's guard refuses after the pool's: the SQL
     * says that cannot happen under the user's lock, and the model holds it to that */
    assert(out != O_RAISED);
    if
    :: out == O_ENQUEUED -> answer()
    :: else -> answer(); goto gone
    fi
  };
  atomic {
    if
    :: printf("[%d] QStash loses job %d's message\n", _pid, j); goto gone
    :: start_job(j, out); invariants();
       if
       :: out == O_STARTED -> out = 0
       :: else -> out = 0; goto gone
       fi
    fi
  };
  atomic {
    if
    :: printf("[%d] worker: the model answers\n", _pid); complete_job(j, C_CURRENT, out)
    :: printf("[%d] worker: the model says 400\n", _pid); spend(sp);
       fail_job(j, C_CURRENT, M_NONE, sp, out)
    :: printf("[%d] worker: an older attempt's worker answers\n", _pid);
       complete_job(j, C_STALE, out)
    :: printf("[%d] worker: dies during the model call\n", _pid)
    fi;
    invariants(); out = 0; sp = false
  };
gone:
  skip
}

/* The user's cancel, of any job, at any time, as often as they press it. */
proctype Cancel() {
  byte j, out;
  bool sp;
  do
  :: atomic {
       any_job(j);
       if
       :: st[j] != S_NONE -> spend(sp); cancel_job(j, sp, out); invariants()
       :: else
       fi;
       j = 0; out = 0; sp = false
     }
  od
}

/* QStash's failure callback, of the job's current message or an older one, again and again
 * (at least once: a handler that died is called again, a duplicate arrives). */
proctype Callback() {
  byte j, out, msg;
  bool sp;
  do
  :: atomic {
       any_job(j);
       if
       :: st[j] != S_NONE -> spend(sp);
          if :: msg = M_CURRENT :: msg = M_OLDER fi;
          fail_job(j, C_NONE, msg, sp, out); invariants()
       :: else
       fi;
       j = 0; out = 0; msg = 0; sp = false
     }
  od
}

/*
 * Cron: one batch sweeps every active job its rule applies to (a lease past the grace, a message
 * never delivered, the max age). Time is not modelled, so the rule may or may not apply to any
 * job at any sweep. LIVENESS: the sweeper comes once a job is active, and by then time has
 * passed every job's max age.
 */
proctype Sweeper() {
  byte j, out;
  bool due, sp;
end:
  do
  :: atomic {
#ifdef LIVENESS
       open > 0 ->
#endif
       j = 0;
       do
       :: j < JOBS ->
          if
          :: ACTIVE(st[j]) ->
#ifdef LIVENESS
             due = true;
#else
             if :: due = true :: due = false fi;
#endif
             spend(sp); sweep_jobs(j, due, sp, out); invariants()
          :: else
          fi;
          j++
       :: else -> break
       od;
       j = 0; out = 0; due = false; sp = false
     }
  od
}

init {
  byte i;
  atomic {
    if :: metered = true :: metered = false fi;
    do
    :: i < JOBS -> run Request(OWNER(i), i); i++
    :: else -> break
    od;
    i = 0;
    /* The liveness run leaves out the cancels and the failure callbacks: each of their calls
     * ends a job or changes nothing, and their loops are not progress (a search without
     * fairness would find them spinning while the sweeper waits). */
#ifndef LIVENESS
    run Cancel();
    run Callback();
#endif
    run Sweeper()
  }
}

/* Never stuck: every request is answered and every job it enqueued ends (spin -a, with
 * LIVENESS: every run is finite, so this says no run ends or loops with a job active or a
 * request waiting, e.g. on a member's lock). */
ltl ends { <> [] (done == JOBS && open == 0) }
