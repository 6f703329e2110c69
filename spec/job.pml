/*
 * One job, its user's quota counter, and every actor that touches them, for spin.
 * The transitions (one per SQL function, each one atomic step as each is one transaction that
 * locks the job's row) come from transitions.pml, generated from spec/transitions.ts.
 * spec/check.ts runs it; RELIABILITY.md explains the bounds.
 */

/* Bounds of the environment (spin -D overrides them). */
#ifndef QUOTA_429
#define QUOTA_429 2     /* provider quota / rate 429 answers in one run */
#endif
#ifndef GATE_CLOSED
#define GATE_CLOSED 1   /* claims that find the shared provider gate closed */
#endif
#ifndef DUPS
#define DUPS 1          /* duplicate deliveries of a message QStash already handed out */
#endif
#ifndef EARLY
#define EARLY 1         /* deliveries before the message's notBefore (clock skew) */
#endif
#ifndef CB_AGAIN
#define CB_AGAIN 1      /* failure callbacks repeated (handler died, or a duplicate) */
#endif
#ifndef SWEEPERS
#define SWEEPERS 2
#endif
#ifndef WORKERS
#define WORKERS 2
#endif
#define RETRIES 1       /* QSTASH_RETRIES: one delivery plus one retry, then the callback */
#define MAXHITS 2       /* PROVIDER_QUOTA_MAX_HITS (3 in production; 2 reaches both branches) */
#define MAXREPUB 1      /* the sweeper's p_max_republish */

/* a claim number that neither the job nor a live worker holds */
#define FRESH(v) (v != att && v != mine[0] && v != mine[1])
#define FRESH_CLAIM (FRESH(1) -> 1 : (FRESH(2) -> 2 : (FRESH(3) -> 3 : 4)))

/* publish_seq + 1 (a requeue, the sweeper's republish): every message QStash holds, every
 * failure callback it owes and every delivery a worker is handling now belongs to an older
 * message than the job's (the generated transitions call this; the caller then publishes the
 * new, current one). Only "current" or "older" matters: fail_job compares the two, nothing else. */
inline supersede() {
  pend[4] = pend[4] + pend[0]; pend[0] = 0;
  pend[5] = pend[5] + pend[1]; pend[1] = 0;
  pend[6] = pend[6] + pend[2]; pend[2] = 0;
  pend[7] = pend[7] + pend[3]; pend[3] = 0;
  cbs[1] = cbs[1] + cbs[0]; cbs[0] = 0;
  if :: mine[0] != 0 -> wold[0] = true :: else fi;
  if :: mine[1] != 0 -> wold[1] = true :: else fi
}

/* METERED: the job is on a metered plan (tokens or money), in quarters of its hold; else a job
 * plan, whose hold is one unit. */
#ifdef METERED
#define metered true
#else
#define metered false
#endif

#include "transitions.pml"

/* the job (model variables the generated transitions read and write) */
byte st = S_NONE;
byte att;               /* attempts: the claim number */
byte lease;
bool waiting;           /* queued with resume_at still ahead */
bool undelivered;       /* queued (or resumed) longer than the sweeper's threshold */
bool aged;              /* older than the max job age */
byte hits;
byte repub;
byte reason;
byte counter;           /* the user's quota_usage.units_used */
bool refundLeft = true; /* the user's refunds after spend are under the plan's bound (budget()) */
bool paid;              /* the job's attempts consumed provider tokens (generation_jobs.consumed > 0) */
bool reasons;           /* metered: the job's model reasons (chosen at the start, both ways) */
byte cons;              /* metered: generation_jobs.consumed, in quarters of the hold */
byte own;               /* scratch: what the attempt a transition ends cost (0 between steps) */
byte bcost;             /* scratch: billed()'s attempt cost (0 between steps) */
bool blost;             /* scratch: billed()'s attempt was cut by someone else's ending */

/* ghosts: what the invariants are stated in */
byte reserved;          /* units enqueue reserved */
byte refunds;           /* refunds made */
byte fate = S_NONE;     /* the first final status */
bool withheld;          /* ended with the unit kept spent (past the bound of refunds after spend) */
bool spent;             /* a worker saw an attempt consume: a release with usage, or a reclaim */
byte lastActive = S_NONE; /* the job's status before the step just taken */
byte mine[2];           /* the claim each live worker holds (0: none) */
bool cbOld;             /* the failure callback that failed the job came from an older message */
byte capt;              /* metered: what the ending captured */
byte settled;           /* metered: endings that settled the hold (captured, released the rest) */
byte bill;              /* metered: what the provider billed for the job's attempts, as SQL can know it */

/* QStash. Every message carries the same job id and its publish_seq, so messages that agree on
 * notBefore, on whether they were retried and on whether their seq is still the job's are
 * interchangeable: QStash is a count per kind. */
#define KIND(nb, retried, old) ((old) * 4 + (nb) * 2 + (retried))
byte pend[8];           /* messages waiting for delivery, by kind */
bool delivered;         /* some message was handed out (so a duplicate can arrive) */
byte cbs[2];            /* failure callbacks due: of a current message [0], of an older one [1] */
bool wold[2];           /* the message a worker is handling is older than the job's */
byte quota429 = QUOTA_429, gate = GATE_CLOSED, dups = DUPS, early = EARLY, cbagain = CB_AGAIN;

#define final(s) (s == S_SUCCEEDED || s == S_FAILED || s == S_CANCELED)
#define ended final(st)
#define held (st == S_RUNNING && (mine[0] == att || mine[1] == att))

/* A metered plan: the hold settles once, the counter is the hold or the capture, the user pays
 * what the provider billed, up to the hold, and no attempt starts that could take the bill past
 * twice the hold. (What streamed after an attempt's last progress write, when someone else ends
 * it, is the one progress interval docs/DESIGN.md#metering-hold-and-capture leaves uncounted.) */
inline metered_invariants() {
  assert(settled == (final(st) -> 1 : 0));
  assert(capt <= HOLD);
  assert(counter == ((st == S_QUEUED || st == S_RUNNING) -> HOLD : (final(st) -> capt : 0)));
  assert(cons <= HOLD || final(st));
  assert(bill <= 2 * HOLD);
  assert(!final(st) || (st == S_FAILED && reason == R_PROVIDER_MISCONFIGURED) ||
    capt >= ((bill > HOLD) -> HOLD : bill));
  if :: fate == S_NONE && final(st) -> fate = st :: else -> skip fi
}

/* What the worker's attempt billed (`bcost`), or, cut by someone else's ending (`blost`), what
 * SQL could know of it: a reasoning model's bill (hidden, at most its bound), else its prompt and
 * last progress write. */
inline billed() {
  if
  :: metered && (!blost || reasons) -> bill = bill + bcost
  :: metered && blost && !reasons -> bill = bill + ((bcost > PROGRESS_COST) -> PROGRESS_COST : bcost)
  :: else -> skip
  fi;
  bcost = 0; blost = false
}

inline job_plan_invariants() {
  if
  :: fate == S_NONE && final(st) -> fate = st;
     /* A refund after provider spend only under the plan's bound: an ending after spend (earlier
      * attempts consumed, a running attempt someone else ended, a running cancel) keeps the unit
      * exactly when the bound is reached; the operator's fault never does. The worker's own
      * endings (a 400, a 429 give-up) report that their attempt billed nothing. */
     if
     :: st == S_FAILED || st == S_CANCELED ->
        assert(withheld == (!refundLeft && !(st == S_FAILED && reason == R_PROVIDER_MISCONFIGURED) &&
          (spent || (lastActive == S_RUNNING && (st == S_CANCELED ||
            (reason != R_MODEL_REFUSED && reason != R_PROVIDER_QUOTA_EXHAUSTED &&
             reason != R_CAPACITY_UNAVAILABLE))))))
     :: else -> skip
     fi
  :: else -> skip
  fi;
  if :: st == S_QUEUED || st == S_RUNNING -> lastActive = st :: else -> skip fi;
  /* a refund exactly once: never twice, only for failed/canceled, always for a failed or
   * canceled job except one past the plan's bound of refunds after spend, which is never
   * refunded (withheld) */
  assert(refunds <= 1);
  assert(!(st == S_SUCCEEDED) || refunds == 0);
  assert(!(st == S_FAILED) || (refunds == 1) != withheld);
  assert(!(st == S_CANCELED) || (refunds == 1) != withheld);
  /* the counter equals open holds + captures */
  assert(counter == reserved - refunds);
  assert(counter == ((st == S_QUEUED || st == S_RUNNING || st == S_SUCCEEDED || withheld) -> 1 : 0))
}

inline invariants() {
  /* no completion over a cancel or a failure */
  assert(!(st == S_SUCCEEDED && (fate == S_CANCELED || fate == S_FAILED)));
  /* one fate: a final job never changes again */
  assert(fate == S_NONE || st == fate);
  /* the job knows what its attempts consumed, as the workers saw it */
  assert(paid == spent);
  if
  :: metered -> metered_invariants()
  :: else -> job_plan_invariants()
  fi
}

/* The user's other jobs may have used up the period's refunds after spend by the time this job
 * ends, or not: chosen at each step that may end the job, and put back after it (only the
 * ending's step reads it, so the choice multiplies paths, not stored states). */
inline budget() {
  if
  :: skip
  :: !metered -> refundLeft = false;
     printf("[%d] the period's refunds after spend are used up\n", _pid)
  fi
}

/* A live worker's claim is taken only by the user, the failure callback of the job's current
 * message, the enqueue's publish failure or the max age: never by a reclaim, by the sweeper's
 * lease rule (the platform ends a worker before its lease runs out, so a live worker's lease
 * never expires) or by the callback of a message a requeue or a republish superseded.
 * STRICT_CLAIM: not by the failure callback at all (a known gap: RELIABILITY.md). */
inline claim_lost() {
#ifdef STRICT_CLAIM
  assert(st == S_CANCELED || (st == S_FAILED &&
    (reason == R_PUBLISH_FAILED || reason == R_MAX_AGE_EXCEEDED)))
#else
  assert(st == S_CANCELED || (st == S_FAILED &&
    ((reason == R_DELIVERY_FAILED && !cbOld) || reason == R_PUBLISH_FAILED ||
     reason == R_MAX_AGE_EXCEEDED)))
#endif
}

/* Whoever publishes read the job's publish_seq just now: a new message is a current one. */
inline publish(nb) {
  pend[KIND(nb, 0, 0)]++
}

/* A publish that reached QStash and answered, reached it and lost the answer, or failed. */
inline publish_answered(nb, ok) {
  if
  :: publish(nb); ok = true; printf("[%d] publish: sent\n", _pid)
  :: publish(nb); ok = false; printf("[%d] publish: sent, but the answer is lost\n", _pid)
  :: ok = false; printf("[%d] publish: fails\n", _pid)
  fi
}

/* QStash hears the worker's answer (a death is a timeout: not ok): done, a retry, or, after the
 * last retry, the failure callback. Then the function instance is gone. */
inline finish(good) {
  if
  :: dup || good -> printf("[%d] worker %d: answers 200\n", _pid, w)
  :: !dup && !good && tr < RETRIES -> pend[KIND(nb, 1, wold[w])]++;
     printf("[%d] worker %d: 5xx or timeout: QStash will retry (older message %d)\n", _pid, w, wold[w])
  :: !dup && !good && tr >= RETRIES -> cbs[wold[w]]++;
     printf("[%d] worker %d: 5xx or timeout after the last retry: failure callback due (older message %d)\n", _pid, w, wold[w])
  fi;
  mine[w] = 0; wold[w] = false;
  /* forget the instance's locals, so states differ only in what matters */
  out = 0; a = 0; path = 0; nb = false; tr = false; dup = false; ok = false; bd = false;
  sp = false; wr = false
}

/* QStash hands this worker a delivery: a pending message (one with notBefore only once the job
 * may resume, or early while the skew budget lasts), or a duplicate of one already handed out. */
inline take() {
  if
  :: pend[KIND(0, 0, 0)] > 0 -> pend[KIND(0, 0, 0)]--; nb = 0; tr = 0
  :: pend[KIND(0, 1, 0)] > 0 -> pend[KIND(0, 1, 0)]--; nb = 0; tr = 1
  :: pend[KIND(1, 0, 0)] > 0 && !waiting -> pend[KIND(1, 0, 0)]--; nb = 1; tr = 0
  :: pend[KIND(1, 1, 0)] > 0 && !waiting -> pend[KIND(1, 1, 0)]--; nb = 1; tr = 1
  :: pend[KIND(1, 0, 0)] > 0 && waiting && early > 0 -> early--; pend[KIND(1, 0, 0)]--; nb = 1; tr = 0
  :: pend[KIND(0, 0, 1)] > 0 -> pend[KIND(0, 0, 1)]--; nb = 0; tr = 0; wold[w] = true
  :: pend[KIND(0, 1, 1)] > 0 -> pend[KIND(0, 1, 1)]--; nb = 0; tr = 1; wold[w] = true
  :: pend[KIND(1, 0, 1)] > 0 && !waiting -> pend[KIND(1, 0, 1)]--; nb = 1; tr = 0; wold[w] = true
  :: pend[KIND(1, 1, 1)] > 0 && !waiting -> pend[KIND(1, 1, 1)]--; nb = 1; tr = 1; wold[w] = true
  :: pend[KIND(1, 0, 1)] > 0 && waiting && early > 0 -> early--; pend[KIND(1, 0, 1)]--; nb = 1; tr = 0;
     wold[w] = true
  :: delivered && dups > 0 -> dups--; dup = true
  fi;
  printf("[%d] worker %d: QStash delivers (retry %d, duplicate %d, older message %d)\n", _pid, w, tr, dup, wold[w]);
  delivered = true
}

/*
 * A worker slot: one function instance at a time; a death ends the instance (QStash sees a
 * timeout) and the slot takes the next delivery. Two atomic steps per delivery, the claim and
 * the write of the model's result, because those are the points where other actors can act in
 * between. Deaths, publishes and answers are folded into the step before them: they only add
 * messages or free a lease, so doing them at once can only enable more of what others do.
 */
#define P_SUCCESS 1
#define P_GATE 2
#define P_QUOTA 3
#define P_TRANSIENT 4
#define P_REFUSED 5
#define P_MISCONFIGURED 6
#define P_CAPACITY 7
proctype Worker(byte w) {
  byte out, a, path;
  bool nb, tr, dup, ok, bd, sp, wr;
  do
  :: atomic {
       take();
       wr = (st == S_RUNNING);
       start_job(out);
       if :: out == O_STARTED && wr -> spent = true :: else -> skip fi; /* a reclaim */
       wr = false;
       invariants();
       if
       :: out == O_NOT_READY ->
          /* publish a message for the resume time (QStash would drop a retry's second publish
           * of it as a duplicate; the model sends it again, which only adds deliveries) */
          publish_answered(true, ok); finish(ok); goto next
       :: out != O_STARTED && out != O_NOT_READY -> finish(true); goto next
       :: out == O_STARTED -> a = att; mine[w] = a
       fi;
       if
       :: printf("[%d] worker %d: dies during the model call\n", _pid, w);
          bcost = (reasons -> HOLD : PROGRESS_COST); blost = true; billed(); invariants();
          finish(false); goto next                   /* dies, before or during the model call */
       :: gate > 0 -> gate--; path = P_GATE;         /* the shared provider gate is closed */
          printf("[%d] worker %d: provider gate closed\n", _pid, w)
       :: path = P_SUCCESS; printf("[%d] worker %d: the model answers\n", _pid, w)
       :: quota429 > 0 -> quota429--; path = P_QUOTA; /* insufficient_quota or rate_limit_exceeded */
          printf("[%d] worker %d: the model says 429\n", _pid, w)
       :: quota429 > 0 -> quota429--; path = P_CAPACITY; /* flex: 429 resource unavailable */
          printf("[%d] worker %d: the flex tier has no capacity (429)\n", _pid, w)
       :: path = P_TRANSIENT; printf("[%d] worker %d: the model says 500 or times out\n", _pid, w)
       :: path = P_REFUSED; printf("[%d] worker %d: the model says 400\n", _pid, w)
       :: path = P_MISCONFIGURED; printf("[%d] worker %d: the provider refuses our key (401)\n", _pid, w)
       fi;
       /* a requeue's resume time (the provider's retry-after) may lie past the job's deadline */
       if
       :: path == P_GATE || path == P_QUOTA || path == P_CAPACITY ->
          if :: aged -> bd = true :: !aged -> bd = false :: !aged -> bd = true fi
       :: else
       fi
     };
     /* while the model streams: a progress write may find the job no longer this claim's; the
      * worker then cuts the stream and answers 200, leaving the job to whoever ended it */
     if
     :: path != P_GATE && path != P_CAPACITY ->   /* a 429 comes before any stream */
        atomic {
          record_progress(a, out);
          if
          :: out == O_NOT_RUNNING -> bcost = (reasons -> HOLD : PROGRESS_COST); blost = true; billed()
          :: else
          fi;
          invariants();
          if
          :: out == O_NOT_RUNNING -> claim_lost(); finish(true); goto next
          :: else -> skip
          fi
        }
     :: skip
     fi;
     atomic {
       if
       :: path == P_SUCCESS ->
          complete_job(a, out); bcost = COMPLETE_COST; blost = (out != O_COMPLETED); billed();
          invariants();
          if :: out != O_COMPLETED -> claim_lost() :: else fi;
          ok = true
       :: path == P_GATE || path == P_QUOTA || path == P_CAPACITY ->
          budget(); requeue_job(a, path == P_QUOTA, bd, path == P_CAPACITY, out); invariants(); refundLeft = true;
          if
          :: out == O_NOT_RUNNING -> claim_lost(); ok = true
          :: out == O_REQUEUED -> publish_answered(true, ok)   /* not sent: 503, QStash retries */
          :: out == O_GAVE_UP -> ok = true
          fi
       :: path == P_TRANSIENT ->
          /* the attempt streamed before it timed out, or failed before it billed anything */
          if :: sp = true :: sp = false fi;
          release_job(a, sp, out); bcost = RELEASE_REPORT; blost = (out == O_NOT_RUNNING); billed();
          if :: out == O_RELEASED && sp -> spent = true :: else -> skip fi;
          invariants();
          /* the attempt budget: the worker's own ending */
          if :: out != O_RELEASED && out != O_BUDGET_EXHAUSTED -> claim_lost() :: else fi;
          ok = (out != O_RELEASED)                  /* released: 503, so QStash retries */
       :: path == P_REFUSED ->
          budget(); fail_job(a, R_MODEL_REFUSED, M_NONE, out); invariants(); refundLeft = true;
          if :: out != O_FAILED -> claim_lost() :: else fi;
          ok = true
       :: path == P_MISCONFIGURED ->
          budget(); fail_job(a, R_PROVIDER_MISCONFIGURED, M_NONE, out); invariants(); refundLeft = true;
          if :: out != O_FAILED -> claim_lost() :: else fi;
          ok = true
       fi;
       if
       :: finish(ok)
       :: printf("[%d] worker %d: dies before answering\n", _pid, w); finish(false)
       fi
     };
next:
     skip
  od
}

/* POST /api/jobs: reserve + insert, then publish (or die between the two); a failed publish
 * fails the job, which refunds it (or the function dies first). */
proctype Enqueue() {
  byte out;
  bool ok;
  atomic {
    enqueue_job(out); invariants();
    if
    :: printf("[%d] enqueue: dies before publishing\n", _pid); goto gone
    :: publish_answered(false, ok)
    fi
  };
  if
  :: ok -> skip
  :: !ok -> d_step { fail_job(0, R_PUBLISH_FAILED, M_NONE, out); invariants() }
  :: !ok -> skip                             /* dies before failing it */
  fi;
gone:
  skip
}

/* QStash's failure callback handler: at least once, maybe more. The callback carries the failed
 * message's seq: the job's current one, or an older one. */
proctype Callback() {
  byte out, o, m;
  do
  :: atomic {
       if
       :: cbs[0] > 0 -> o = 0
       :: cbs[1] > 0 -> o = 1
       fi;
       cbs[o]--; printf("[%d] QStash calls the failure callback (older message %d)\n", _pid, o);
       if
       :: cbagain > 0 -> cbagain--; cbs[o]++     /* died before answering: called again */
       :: m = (o -> M_OLDER : M_CURRENT); budget(); fail_job(0, R_DELIVERY_FAILED, m, out);
          if :: out == O_FAILED -> cbOld = o :: else fi;
          invariants(); refundLeft = true;
          if :: cbagain > 0 -> cbagain--; cbs[o]++ :: skip fi
       fi;
       out = 0; o = 0; m = 0
     }
  od
}

/* QStash may lose any message it holds (the liveness claim holds even when all are lost). */
proctype Loss() {
  do
  :: d_step { pend[0] > 0 -> pend[0]--; printf("[%d] QStash loses a message\n", _pid) }
  :: d_step { pend[1] > 0 -> pend[1]--; printf("[%d] QStash loses a message\n", _pid) }
  :: d_step { pend[2] > 0 -> pend[2]--; printf("[%d] QStash loses a message\n", _pid) }
  :: d_step { pend[3] > 0 -> pend[3]--; printf("[%d] QStash loses a message\n", _pid) }
  :: d_step { pend[4] > 0 -> pend[4]--; printf("[%d] QStash loses a message\n", _pid) }
  :: d_step { pend[5] > 0 -> pend[5]--; printf("[%d] QStash loses a message\n", _pid) }
  :: d_step { pend[6] > 0 -> pend[6]--; printf("[%d] QStash loses a message\n", _pid) }
  :: d_step { pend[7] > 0 -> pend[7]--; printf("[%d] QStash loses a message\n", _pid) }
  od
}

/* The user cancels at most once. */
proctype Cancel() {
  byte out;
  if
  :: skip                                   /* the user never cancels */
  :: st != S_NONE -> atomic { budget(); cancel_job(out); invariants(); refundLeft = true }
  fi
}



/* Cron: forever; a death between the sweep and the republish leaves the job queued. */
proctype Sweeper() {
  byte out;
  bool ok;
  do
  :: atomic {
       budget(); sweep_jobs(out); invariants(); refundLeft = true;
       if
       :: out == O_REPUBLISH -> publish_answered(false, ok)
       :: else
       fi;
       out = 0; ok = false
     }
  od
}

/* Time, one process per clock so that weak fairness makes each of them move. */
proctype LeaseClock() {
  do
  :: d_step { st == S_RUNNING && lease == L_LIVE && !held -> lease = L_EXPIRED;
       printf("[%d] time: the lease expires\n", _pid) }
  :: d_step { st == S_RUNNING && lease == L_EXPIRED -> lease = L_PAST_GRACE;
       printf("[%d] time: the lease is past the sweeper's grace\n", _pid) }
  od
}
proctype ResumeClock() {
  do
  :: d_step { st == S_QUEUED && waiting -> waiting = false; printf("[%d] time: resume_at reached\n", _pid) }
  od
}
proctype UndeliveredClock() {
  do
  :: d_step { st == S_QUEUED && !waiting && !undelivered -> undelivered = true;
       printf("[%d] time: queued past the undelivered threshold\n", _pid) }
  od
}
proctype AgeClock() {
#ifndef NO_MAX_AGE
  d_step { st != S_NONE && !aged -> aged = true; printf("[%d] time: the job passes the max age\n", _pid) }
#else
  skip
#endif
}

init {
  atomic {
    if :: metered -> reasons = true :: metered -> reasons = false :: else -> skip fi;
    run Enqueue();
    run Worker(0);
#if WORKERS > 1
    run Worker(1);
#endif
    run Callback();
    run Loss();
    run Cancel();
    run Sweeper();
#if SWEEPERS > 1
    run Sweeper();
#endif
    run LeaseClock();
    run ResumeClock();
    run UndeliveredClock();
    run AgeClock()
  }
}

/* Never stuck: once enqueued, every job ends (checked with weak fairness, spin -a -f). */
ltl ends { [] ((st != S_NONE) -> <> ended) }
