/**
 * `npm run config:docs`: writes `.env.example` and the configuration table in docs/DESIGN.md
 * from `VARIABLES` in lib/config.ts, the one place a variable is declared.
 * test/unit/config-docs.test.ts fails when either file says something else.
 */
import { readFileSync, writeFileSync } from "node:fs";
import { fileURLToPath } from "node:url";
import { type Group, isRequired, VARIABLES, type VariableName } from "../lib/config.ts";

const GROUP_TITLES: Record<Group, string> = {
  supabase: "Supabase (server side only: the service role key never reaches a browser or a log)",
  qstash: "QStash",
  redis: "Upstash Redis (rate limit, provider gate, alert dedup)",
  openai: "OpenAI",
  app: "The app",
  tunables: "Tunables (defaults shown)",
};

const names = Object.keys(VARIABLES) as VariableName[];

/** `.env.example`, exactly. */
export function renderEnvExample(): string {
  const out = [
    "# Every variable the functions read; lib/config.ts validates them once at start-up and names",
    "# every missing or malformed one (never its value). An empty value counts as unset.",
    "# `npm run dev` sets all of these for the local stack; a deployment sets them in Vercel.",
    "# Written by `npm run config:docs` from lib/config.ts.",
  ];
  let group: Group | undefined;
  for (const name of names) {
    const v = VARIABLES[name];
    if (v.group !== group) {
      group = v.group;
      out.push("", `# --- ${GROUP_TITLES[group]} ---`);
    }
    const when = isRequired(name)
      ? v.requiredUnless
        ? `required, or ${v.requiredUnless}`
        : "required"
      : v.shownDefault
        ? `default ${v.shownDefault.replace(/`/g, "")}`
        : "optional";
    out.push(`# ${v.about.replace(/`/g, "")}; ${when}`, `${name}=${v.example ?? ""}`);
  }
  return `${out.join("\n")}\n`;
}

/** The rows of docs/DESIGN.md's configuration table: variable, required, default, meaning. */
export function configTableRows(): string[][] {
  return names.map((name) => [
    `\`${name}\``,
    isRequired(name)
      ? VARIABLES[name].requiredUnless
        ? `yes, or \`${VARIABLES[name].requiredUnless}\``
        : "yes"
      : "no",
    VARIABLES[name].shownDefault ?? "",
    VARIABLES[name].about,
  ]);
}

const HEADER = ["variable", "required", "default", "meaning"];

/** The table as docs/DESIGN.md holds it, columns padded (as the formatter leaves them). */
export function renderConfigTable(): string {
  const rows = [HEADER, ...configTableRows()];
  const widths = HEADER.map((_, i) => Math.max(...rows.map((r) => [...(r[i] ?? "")].length)));
  const line = (r: string[]) =>
    `| ${r.map((c, i) => c + " ".repeat((widths[i] ?? 0) - [...c].length)).join(" | ")} |`;
  return [line(HEADER), `| ${widths.map((w) => "-".repeat(w)).join(" | ")} |`]
    .concat(rows.slice(1).map(line))
    .join("\n");
}

/** The table's rows as a reader sees them (cells trimmed), from a markdown document. */
export function tableRowsIn(markdown: string): string[][] {
  const start = markdown.indexOf("| variable ");
  if (start < 0) return [];
  const rows: string[][] = [];
  for (const l of markdown.slice(start).split("\n").slice(2)) {
    if (!l.startsWith("|")) break;
    rows.push(
      l
        .slice(1, -1)
        .split(/(?<!\\)\|/)
        .map((c) => c.trim()),
    );
  }
  return rows;
}

const DESIGN = "docs/DESIGN.md";

function replaceTable(markdown: string): string {
  const start = markdown.indexOf("| variable ");
  if (start < 0) throw new Error(`${DESIGN} has no configuration table`);
  const lines = markdown.slice(start).split("\n");
  const length = lines.findIndex((l) => !l.startsWith("|"));
  const end = start + lines.slice(0, length).join("\n").length;
  return markdown.slice(0, start) + renderConfigTable() + markdown.slice(end);
}

if (process.argv[1] === fileURLToPath(import.meta.url)) {
  writeFileSync(".env.example", renderEnvExample());
  writeFileSync(DESIGN, replaceTable(readFileSync(DESIGN, "utf8")));
  console.log(`wrote .env.example and the configuration table in ${DESIGN}`);
}
