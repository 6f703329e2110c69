/**
 * Extraction schemas inside OpenAI's strict subset that are costly or impossible to check an
 * answer against (lib/kinds/schema-cost.ts refuses them), and the answers that show it.
 */

/** An object schema with every property required and no other. */
export const object = (
  properties: Record<string, unknown>,
  extra: Record<string, unknown> = {},
) => ({
  type: "object",
  properties,
  required: Object.keys(properties),
  additionalProperties: false,
  ...extra,
});

/**
 * The root's `n` is anyOf k copies of definition B, `$ref: "#"` and null; B's `n` is anyOf k + 1
 * copies of B and a string. Any `{"n": {"n": … null}}` chain conforms (through "#"), but Ajv
 * tries every B at every level first, and each fails only at the leaf (null is no string): a
 * conforming answer costs about (k + 1)^depth. Under 450 bytes.
 */
export const bomb = (k: number) =>
  object(
    {
      n: {
        anyOf: [
          ...Array.from({ length: k }, () => ({ $ref: "#/$defs/B" })),
          { $ref: "#" },
          { type: "null" },
        ],
      },
    },
    {
      $defs: {
        B: object({
          n: {
            anyOf: [
              ...Array.from({ length: k + 1 }, () => ({ $ref: "#/$defs/B" })),
              { type: "string" },
            ],
          },
        }),
      },
    },
  );

/** The conforming answer to {@link bomb}: `depth` objects nested through `n`, null at the end. */
export function chain(depth: number): unknown {
  let value: unknown = null;
  for (let i = 0; i < depth; i++) value = { n: value };
  return value;
}

/** Reference cycles that pass through no object property or array item. */
export const cycles = {
  /** A definition that is anyOf itself or null (166 bytes). */
  selfAnyOf: object(
    { a: { $ref: "#/$defs/A" } },
    { $defs: { A: { anyOf: [{ $ref: "#/$defs/A" }, { type: "null" }] } } },
  ),
  /** A → B → A through anyOf branches. */
  mutual: object(
    { a: { $ref: "#/$defs/A" } },
    {
      $defs: {
        A: { anyOf: [{ $ref: "#/$defs/B" }, { type: "null" }] },
        B: { anyOf: [{ $ref: "#/$defs/A" }, { type: "string" }] },
      },
    },
  ),
  /** A definition that is only a reference to itself. */
  onlySelf: object({ a: { $ref: "#/$defs/A" } }, { $defs: { A: { $ref: "#/$defs/A" } } }),
};

/** Where each cycle is refused, under `input.schema`. */
export const cyclePaths = {
  selfAnyOf: "input.schema.$defs.A.anyOf[0].$ref",
  mutual: "input.schema.$defs.A.anyOf[0].$ref",
  onlySelf: "input.schema.$defs.A.$ref",
};
