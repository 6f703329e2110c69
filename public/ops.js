// @ts-check
/**
 * The operator page (/ops): sign in as on the main page (auth.js: Supabase Auth through
 * auth-js, or the dev sign-in's session of this tab), then GET /api/ops/metrics for the chosen
 * window and draw each series with uPlot. A user without the operator role gets 403 from the
 * API and this page shows nothing but that; the page itself holds no data and no secret.
 * uPlot styles its elements through the CSSOM (element.style), which the CSP's
 * `style-src 'self'` allows; nothing here is an inline script or style attribute.
 */
import { AuthError, authErrorSentence, createAuth, discover } from "./auth.js";
import uPlot from "./vendor/uplot.esm.js";

/** @param {string} id */
const byId = (id) => /** @type {HTMLElement} */ (document.getElementById(id));

/**
 * Each chart: its anchor (the alerts link to /ops#<id>), its title, the series it draws and the
 * runbook section that explains it.
 * @typedef {{ id: string, title: string, unit: string, runbook: string,
 *   series?: Array<[key: string, label: string]>, reasons?: true, latency?: "queueLatency" | "runTime" }} Chart
 * @type {Chart[]}
 */
const CHARTS = [
  {
    id: "jobs",
    title: "Jobs started and ended",
    unit: "jobs",
    runbook: "jobs-stuck",
    series: [
      ["enqueued", "Started (enqueued)"],
      ["succeeded", "Succeeded"],
      ["failed", "Failed"],
      ["canceled", "Canceled"],
    ],
  },
  {
    id: "failures",
    title: "Failed jobs by reason",
    unit: "jobs",
    runbook: "user-failures",
    reasons: true,
  },
  {
    id: "refunds",
    title: "Refunds and withheld refunds",
    unit: "jobs",
    runbook: "refunds",
    series: [
      ["refunded", "Refunded"],
      ["withheld", "Refund withheld"],
    ],
  },
  {
    id: "tokens",
    title: "Token plan holds and captures, provider tokens consumed",
    unit: "tokens",
    runbook: "model-spend",
    series: [
      ["tokensHeld", "Held (token plans)"],
      ["tokensCaptured", "Captured (token plans)"],
      ["providerTokens", "Consumed at the provider (all plans)"],
    ],
  },
  {
    id: "provider-429s",
    title: "Provider 429s",
    unit: "429s",
    runbook: "provider-429s",
    series: [["provider429s", "429s counted by jobs"]],
  },
  {
    id: "provider-gate",
    title: "Time the provider gate was closed",
    unit: "seconds",
    runbook: "provider-429s",
    series: [["gateClosedSeconds", "Seconds closed"]],
  },
  {
    id: "failure-callbacks",
    title: "Failure callbacks",
    unit: "callbacks",
    runbook: "delivery-failed",
    series: [
      ["failureCallbacks", "Failed a job (delivery_failed)"],
      ["supersededCallbacks", "Superseded (changed nothing)"],
    ],
  },
  {
    id: "queue-latency",
    title: "Queue latency: enqueue to first claim",
    unit: "seconds",
    runbook: "jobs-stuck",
    latency: "queueLatency",
  },
  {
    id: "run-time",
    title: "Run time of succeeded jobs",
    unit: "seconds",
    runbook: "model-spend",
    latency: "runTime",
  },
];

const COLORS = [
  "#0b5cad",
  "#1a7f37",
  "#b3261e",
  "#8a5a00",
  "#6f42c1",
  "#0a7d8c",
  "#bf3989",
  "#57606a",
];

/**
 * A runbook link in `into`: `runbookUrl#anchor` when the deployment names one (RUNBOOK_URL),
 * else the section's place in the repository, as text.
 * @param {HTMLElement} into
 * @param {string} label
 * @param {string} anchor
 * @param {string | null} runbookUrl
 */
function runbookLink(into, label, anchor, runbookUrl) {
  if (runbookUrl) {
    const a = document.createElement("a");
    a.href = `${runbookUrl}#${anchor}`;
    a.textContent = label;
    into.replaceChildren(a);
  } else into.textContent = `${label}: docs/RUNBOOK.md#${anchor}`;
}

/** @param {number} seconds */
function bucketWords(seconds) {
  return seconds >= 3600 ? `${seconds / 3600} h` : `${seconds / 60} min`;
}

/** @type {uPlot[]} */
let plots = [];

/**
 * One plan's row: its model, tier, worst-case bill and shutdown date ("none announced" when the
 * provider gives none; "not read yet" before the first watch).
 * @param {import("../lib/ops.ts").OpsMetrics["plans"][number]} p
 */
function planRow(p) {
  const tr = document.createElement("tr");
  const bill =
    p.worstCaseMicroUsd === null
      ? "not priced"
      : `$${(p.worstCaseMicroUsd / 1_000_000).toLocaleString("en-US", { minimumFractionDigits: 2, maximumFractionDigits: 2 })}`;
  const shutdown = p.shutdownDate ?? (p.catalogueCheckedAt ? "none announced" : "not read yet");
  for (const text of [p.plan, p.meter, p.model ?? "—", p.serviceTier, bill, shutdown]) {
    const td = document.createElement("td");
    td.textContent = text;
    tr.append(td);
  }
  if (p.shutdownDate) tr.dataset.alarm = "true";
  return tr;
}

/**
 * @param {any} m  the GET /api/ops/metrics body
 */
function render(m) {
  for (const p of plots) p.destroy();
  plots = [];
  byId("range").textContent =
    `${new Date(m.from).toLocaleString()} to ${new Date(m.to).toLocaleString()}, one point per ${bucketWords(m.bucketSeconds)}.`;
  const stuck = m.now.stuck;
  const stuckTotal =
    stuck.running_lease_expired + stuck.active_past_max_age + stuck.queued_never_delivered;
  byId("stuck-value").textContent = String(stuckTotal);
  byId("stuck-detail").textContent =
    `${stuck.running_lease_expired} lease expired, ${stuck.active_past_max_age} past max age, ${stuck.queued_never_delivered} never delivered`;
  byId("stuck").dataset.alarm = String(stuckTotal > 0);
  byId("drift-value").textContent = String(m.now.driftRows);
  byId("drift").dataset.alarm = String(m.now.driftRows > 0);
  byId("drift-detail").textContent =
    `quota periods from ${new Date(m.now.driftSince).toLocaleDateString(undefined, { timeZone: "UTC", year: "numeric", month: "long" })} (UTC), the ones that can still change; always 0, anything else is a bug. Earlier periods: npm run reconcile.`;
  byId("models-rows").replaceChildren(...m.plans.map(planRow));
  for (const el of document.querySelectorAll("[data-runbook]")) {
    const into = /** @type {HTMLElement} */ (el);
    runbookLink(into, into.dataset.label ?? "Runbook", into.dataset.runbook ?? "", m.runbookUrl);
  }

  const host = byId("charts");
  host.replaceChildren();
  const width = Math.max(300, Math.min(900, host.clientWidth || 900) - 34);
  for (const chart of CHARTS) {
    const section = document.createElement("section");
    section.className = "chart";
    section.id = chart.id;
    section.setAttribute("aria-labelledby", `${chart.id}-title`);
    const h = document.createElement("h3");
    h.id = `${chart.id}-title`;
    h.textContent = `${chart.title} (${chart.unit})`;
    const link = document.createElement("p");
    link.className = "runbook";
    runbookLink(link, "What it means (runbook)", chart.runbook, m.runbookUrl);
    section.append(h, link);
    /** @type {Array<[string, Array<number | null>]>} */
    let lines;
    if (chart.reasons) lines = Object.entries(m.failuresByReason);
    else if (chart.latency) {
      const l = m.latency[chart.latency];
      lines = [
        ["p50", l.p50],
        ["p90", l.p90],
        ["p99", l.p99],
      ];
    } else lines = (chart.series ?? []).map(([key, label]) => [label, m.series[key]]);
    const hasData = lines.some(([, values]) => values.some((v) => v !== null && v !== 0));
    if (!hasData) {
      const p = document.createElement("p");
      p.className = "empty";
      p.textContent = "No data in this window.";
      section.append(p);
      host.append(section);
      continue;
    }
    const plot = document.createElement("div");
    plot.className = "plot";
    plot.setAttribute("role", "img");
    plot.setAttribute(
      "aria-label",
      `${chart.title}: ${lines
        .map(([label, values]) => `${label} ${values.reduce((a, v) => (a ?? 0) + (v ?? 0), 0)}`)
        .join(", ")} in this window`,
    );
    section.append(plot);
    host.append(section);
    const data = /** @type {uPlot.AlignedData} */ ([m.buckets, ...lines.map(([, v]) => v)]);
    plots.push(
      new uPlot(
        {
          width,
          height: 200,
          series: [
            {},
            ...lines.map(([label], i) => ({
              label,
              stroke: COLORS[i % COLORS.length],
              width: 2,
              spanGaps: false,
              // a lone measured bucket (a percentile between empty ones) is a dot, not nothing
              points: { show: true, size: 6, fill: COLORS[i % COLORS.length] },
            })),
          ],
          axes: [{}, { label: chart.unit, size: 60 }],
          scales: { y: { range: (_u, _min, max) => [0, Math.max(1, max)] } },
        },
        data,
        plot,
      ),
    );
  }
  if (location.hash) document.getElementById(location.hash.slice(1))?.scrollIntoView();
}

async function main() {
  const { supabase } = await discover();
  const auth = createAuth({ supabase, storage: sessionStorage });
  try {
    await auth.ready();
  } catch {
    // a stale link in the fragment: signed out
  }
  const status = byId("status");
  const show = (/** @type {"sign-in" | "forbidden" | "dashboard" | null} */ which) => {
    for (const id of ["sign-in", "forbidden", "dashboard"]) byId(id).hidden = id !== which;
    const s = auth.session();
    byId("account").hidden = !s;
    byId("who").textContent = s ? (s.email ?? s.userId) : "";
  };

  /** @returns {string} */
  const windowChosen = () =>
    /** @type {HTMLInputElement | null} */ (document.querySelector('input[name="window"]:checked'))
      ?.value ?? "day";

  async function load() {
    const token = await auth.accessToken();
    if (!token) {
      status.textContent = "Sign in to see the system.";
      show("sign-in");
      return;
    }
    status.textContent = "Loading…";
    const res = await fetch(`/api/ops/metrics?window=${encodeURIComponent(windowChosen())}`, {
      headers: { authorization: `Bearer ${token}`, accept: "application/json" },
      cache: "no-store",
    }).catch(() => null);
    if (!res) {
      status.textContent = "Could not reach the app. Check your connection and refresh.";
      return;
    }
    if (res.status === 401) {
      status.textContent = "Your session ended. Sign in again.";
      show("sign-in");
      return;
    }
    if (res.status === 403) {
      status.textContent = "";
      show("forbidden");
      return;
    }
    if (!res.ok) {
      status.textContent = `The metrics could not be read (${res.status}). Try again shortly.`;
      return;
    }
    const body = await res.json();
    status.textContent = "";
    show("dashboard");
    render(body);
  }

  byId("password-form").addEventListener("submit", async (e) => {
    e.preventDefault();
    const email = /** @type {HTMLInputElement} */ (byId("email")).value;
    const password = /** @type {HTMLInputElement} */ (byId("password")).value;
    byId("sign-in-error").textContent = "";
    try {
      await auth.signInWithPassword(email, password);
      await load();
    } catch (err) {
      byId("sign-in-error").textContent = authErrorSentence(
        err instanceof AuthError ? err.code : "unavailable",
      );
    }
  });
  byId("sign-out").addEventListener("click", async () => {
    await auth.signOut();
    show("sign-in");
    status.textContent = "Signed out.";
  });
  byId("window-form").addEventListener("change", () => void load());
  byId("reload").addEventListener("click", () => void load());
  await load();
}

void main();
