/**
 * What the extraction's form offers besides its fields: the bound on a schema and the example
 * schemas to start from. Its own module, free of Ajv, so that declaring the kind (what
 * `GET /api/usage` sends) loads none of the schema checks.
 */
import type { KindExample } from "./kind.ts";

/** Largest schema accepted, in UTF-8 bytes of its JSON text. */
export const MAX_SCHEMA_BYTES = 16 * 1024;

const object = (properties: Record<string, unknown>) => ({
  type: "object",
  properties,
  required: Object.keys(properties),
  additionalProperties: false,
});
const text = { type: "string" };
const maybe = (type: string) => ({ type: [type, "null"] });

/**
 * Example schemas, each with a sample text. Each is strict (every property required,
 * `additionalProperties: false`, a value the text may not give is nullable), so it is sent as is.
 */
export const EXAMPLES: KindExample[] = [
  {
    name: "Contact card",
    input: {
      text: "Hi, I'm Ada Lovelace, head of research at Analytical Engines Ltd. Write to ada@engines.example or call +44 20 7946 0018.",
      schema: object({
        name: text,
        organization: maybe("string"),
        role: maybe("string"),
        emails: { type: "array", items: text },
        phones: { type: "array", items: text },
      }),
    },
  },
  {
    name: "Invoice lines",
    input: {
      text: "Invoice 2026-118 from Northwind Paper, due 15 January. 3 reams of A4 paper at 4.50 EUR, 2 boxes of staples at 1.20 EUR, delivery 7.00 EUR. Total 23.90 EUR.",
      schema: object({
        invoiceNumber: maybe("string"),
        seller: maybe("string"),
        currency: maybe("string"),
        lines: {
          type: "array",
          items: object({
            description: text,
            quantity: maybe("number"),
            unitPrice: maybe("number"),
            amount: { type: "number" },
          }),
        },
        total: maybe("number"),
      }),
    },
  },
  {
    name: "Event",
    input: {
      text: "Team offsite: Thursday 12 March 2026, 09:30 to 17:00 at the Harbour Loft, 4 Quay Street. Bring a laptop; lunch is provided.",
      schema: object({
        title: text,
        date: maybe("string"),
        start: maybe("string"),
        end: maybe("string"),
        location: maybe("string"),
        notes: { type: "array", items: text },
      }),
    },
  },
];
