/**
 * The job kinds: the one list (public.job_kinds holds the same ids, test/db/kinds.test.ts). A
 * document's kind is here; every other kind is loaded when a job of it comes, or when its
 * declaration is asked for (`import()`), so its code stays off a document's path and off every
 * function's cold start. What a kind's own module loads eagerly stays small: the extract kind
 * loads Ajv only to check a schema or an output.
 */
import { document } from "./document.ts";
import { declarationOf, type Kind, type KindDeclaration } from "./kind.ts";

const KINDS = {
  document: async (): Promise<Kind> => document as Kind,
  extract: async (): Promise<Kind> => (await import("./extract.ts")).extract as Kind,
  summary: async (): Promise<Kind> => (await import("./summary.ts")).summary as Kind,
} as const;

export type KindId = keyof typeof KINDS;

/** Every kind's id, in the order the API documents them. */
export const KIND_IDS = Object.keys(KINDS) as KindId[];

export const isKindId = (id: unknown): id is KindId =>
  typeof id === "string" && Object.hasOwn(KINDS, id);

/**
 * The kind, loaded. A job's kind is checked at enqueue (and by a foreign key), so an id this code
 * does not know is a deploy behind its database: a bug, thrown.
 * @example
 * const kind = await loadKind("extract");
 * const parsed = await kind.parse({ text, schema });
 */
export async function loadKind(id: string): Promise<Kind> {
  if (!isKindId(id)) throw new Error(`unknown job kind: ${id}`);
  return KINDS[id]();
}

/** Every kind's declaration (its names, its form, its output), in the registry's order. */
export async function declarations(): Promise<KindDeclaration[]> {
  return (await Promise.all(KIND_IDS.map(loadKind))).map(declarationOf);
}

/**
 * The kind's declaration, or null for an id this code does not know (a row from a newer deploy:
 * shown as it is stored, never a 500).
 */
export async function declarationFor(id: string): Promise<KindDeclaration | null> {
  return isKindId(id) ? declarationOf(await loadKind(id)) : null;
}
