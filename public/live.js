// @ts-check
/**
 * Live status: the page's one private Realtime channel, `job:<user id>`, joined with the user's
 * access token (docs/DESIGN.md#live-status). It hears three events:
 * - `job_state` `{job_id, state, seq}`: a transition, from the database in its own transaction
 *   (never one that rolled back); `seq` grows per job;
 * - `job_progress` `{job_id, attempt, offset, text, tokens, thinking, reasoning_tokens}`: the
 *   answer as the worker's progress write stored it (`text` follows `offset` code points);
 * - `job_view` `{job}`: a job's view after the worker ended it (its answer included).
 *
 * `joined` says whether messages arrive; the job list polls whenever it is false. The channel is
 * the official client's (@supabase/realtime-js, public/vendor/realtime-js.js). What this adds
 * is what its users meet: a private channel that rejoins after a sleep with an expired token
 * is refused and stays silent, so every refusal, close or timeout here ends the channel, and
 * a new one is joined after a pause with a token read fresh (`token()` refreshes when due);
 * `wake()` (the tab is visible again) and `tokenChanged()` (the session refreshed) send the
 * current token to the server at once.
 */
import { RealtimeClient } from "./vendor/realtime-js.js";

/** @typedef {{ event: string, payload: Record<string, unknown> }} LiveMessage */

/** Waits before joining again after losing the channel: 1 s, 2 s, 5 s, then every 10 s. */
export const REJOIN_MS = [1000, 2000, 5000, 10_000];

/**
 * @param {{
 *   url: string,
 *   apikey: string,
 *   userId: string,
 *   token: () => Promise<string | null>,
 *   onMessage: (message: LiveMessage) => void,
 *   onJoined: (joined: boolean) => void,
 *   Client?: typeof RealtimeClient,
 * }} options  `url`: the Supabase project's (or, under `npm run dev`, the app's) origin
 */
export function createLive(options) {
  const endpoint = `${options.url.replace(/^http/, "ws")}/realtime/v1`;
  const Client = options.Client ?? RealtimeClient;
  const client = new Client(endpoint, {
    params: { apikey: options.apikey },
    accessToken: options.token,
  });
  const topic = `job:${options.userId}`;
  /** @type {ReturnType<RealtimeClient["channel"]> | null} */
  let channel = null;
  let joined = false;
  let losses = 0;
  let closed = false;
  /** @type {ReturnType<typeof setTimeout> | undefined} */
  let rejoinTimer;

  /** @param {boolean} now */
  const setJoined = (now) => {
    if (joined === now) return;
    joined = now;
    options.onJoined(now);
  };

  async function join() {
    if (closed) return;
    // the token the join carries: read fresh, never the one a sleeping tab kept
    await client.setAuth().catch(() => undefined);
    if (closed) return;
    const mine = client.channel(topic, { config: { private: true } });
    channel = mine;
    for (const event of ["job_state", "job_progress", "job_view"]) {
      mine.on("broadcast", { event }, (message) => {
        if (channel === mine) options.onMessage({ event, payload: message.payload ?? {} });
      });
    }
    mine.subscribe((status) => {
      if (channel !== mine || closed) return;
      if (status === "SUBSCRIBED") {
        losses = 0;
        setJoined(true);
      } else lose(mine);
    });
  }

  /** @param {ReturnType<RealtimeClient["channel"]>} lost */
  function lose(lost) {
    setJoined(false);
    channel = null;
    void client.removeChannel(lost).catch(() => undefined);
    clearTimeout(rejoinTimer);
    const wait = REJOIN_MS[Math.min(losses, REJOIN_MS.length - 1)] ?? 10_000;
    losses += 1;
    rejoinTimer = setTimeout(() => void join(), wait);
  }

  void join();

  return {
    joined: () => joined,
    /** The tab is visible again: the current token to the server, and a new channel if it is gone. */
    wake() {
      if (closed) return;
      void client.setAuth().catch(() => undefined);
      if (channel === null) {
        clearTimeout(rejoinTimer);
        losses = 0;
        void join();
      }
    },
    /** The session refreshed its access token: the channel carries the new one from now on. */
    tokenChanged() {
      if (!closed) void client.setAuth().catch(() => undefined);
    },
    close() {
      closed = true;
      clearTimeout(rejoinTimer);
      setJoined(false);
      channel = null;
      void client.removeAllChannels().catch(() => undefined);
      client.disconnect();
    },
  };
}

/** @typedef {ReturnType<typeof createLive>} Live */
