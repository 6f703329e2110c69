/**
 * Every alert links its chart on the operator page and its runbook section: with APP_URL and
 * RUNBOOK_URL set, as Slack links; without RUNBOOK_URL, the section is named as text and the
 * alert says the setting is missing. Each anchor exists: /ops has the chart, RUNBOOK.md the id.
 */
import { readFileSync } from "node:fs";
import { describe, expect, test } from "vitest";
import { ALERT_LINKS, alertLinks, slackPayload } from "../../lib/alerts.ts";

const read = (path: string) => readFileSync(new URL(`../../${path}`, import.meta.url), "utf8");
const alert = {
  kind: "provider_quota_exhausted",
  dedupKey: "k",
  title: "AI provider quota exhausted (insufficient_quota): add credits",
  fields: { hits: 1 },
};

describe("alert links", () => {
  test("configured: the payload's last block links /ops#provider-429s and the runbook's section", () => {
    const p = slackPayload(alert, {
      appUrl: "https://app.example",
      runbookUrl: "https://git.example/quota-jobs/blob/main/docs/RUNBOOK.md",
    });
    expect(p.blocks.at(-1)).toEqual({
      type: "context",
      elements: [
        {
          type: "mrkdwn",
          text: "<https://app.example/ops#provider-429s|Chart on /ops> · <https://git.example/quota-jobs/blob/main/docs/RUNBOOK.md#provider-quota-exhausted|Runbook>",
        },
      ],
    });
  });

  test("no RUNBOOK_URL: the section is named and the alert says why there is no link", () => {
    const p = slackPayload(alert, { appUrl: "https://app.example" });
    expect(JSON.stringify(p.blocks.at(-1))).toContain(
      "Runbook: docs/RUNBOOK.md#provider-quota-exhausted (RUNBOOK_URL is not set)",
    );
  });

  test("each kind's chart is on the page and its runbook anchor is in RUNBOOK.md", () => {
    const page = read("public/ops.html") + read("public/ops.js");
    const runbook = read("docs/RUNBOOK.md");
    for (const [kind, { chart, runbook: anchor }] of Object.entries(ALERT_LINKS)) {
      expect(page, kind).toMatch(new RegExp(`(id="${chart}"|id: "${chart}")`));
      expect(runbook, kind).toContain(`<a id="${anchor}"></a>`);
    }
    expect(alertLinks("something_new").runbook).toBe(
      "docs/RUNBOOK.md#alerts (RUNBOOK_URL is not set)",
    );
  });
});
