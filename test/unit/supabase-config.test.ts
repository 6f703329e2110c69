/**
 * Sign-up defaults in supabase/config.toml (what `supabase link` / `supabase config push` and
 * the local CLI stack apply): a new account must confirm its email, and anonymous sign-ins stay
 * off. The file is read as the CLI reads it: `[section]` headers and `key = value` lines.
 */
import { readFile } from "node:fs/promises";
import { expect, test } from "vitest";

async function supabaseConfig(): Promise<Record<string, Record<string, string>>> {
  const text = await readFile(new URL("../../supabase/config.toml", import.meta.url), "utf8");
  const sections: Record<string, Record<string, string>> = { "": {} };
  let current = "";
  for (const raw of text.split("\n")) {
    const line = raw.replace(/#.*$/, "").trim();
    if (!line) continue;
    const header = /^\[([^\]]+)\]$/.exec(line);
    if (header?.[1]) {
      current = header[1].trim();
      sections[current] = sections[current] ?? {};
      continue;
    }
    const kv = /^([\w.-]+)\s*=\s*(.+)$/.exec(line);
    const section = sections[current];
    if (section && kv?.[1] && kv[2]) section[kv[1]] = kv[2].trim();
  }
  return sections;
}

test("email sign-ups must be confirmed before the account can sign in", async () => {
  const config = await supabaseConfig();
  expect(config["auth.email"]?.enable_confirmations).toBe("true");
});

test("anonymous sign-ins are off (and get no plan even when turned on)", async () => {
  const config = await supabaseConfig();
  expect(config.auth?.enable_anonymous_sign_ins).toBe("false");
});
