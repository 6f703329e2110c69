/**
 * public/openapi.json is what `npm run openapi` writes (dev/openapi.ts), and a valid
 * document: a change to a kind, a failure reason or an error code shows in the served file.
 */
import { readFileSync } from "node:fs";
import { Ajv2020 } from "ajv/dist/2020.js";
import { expect, test } from "vitest";
import { OPENAPI_FILE, renderOpenApi } from "../../dev/openapi.ts";

test("the committed public/openapi.json is what `npm run openapi` writes", async () => {
  expect(readFileSync(OPENAPI_FILE, "utf8")).toBe(await renderOpenApi());
});

test("every schema in it compiles (JSON Schema 2020-12, as OpenAPI 3.1 has it)", async () => {
  const doc = JSON.parse(await renderOpenApi());
  const ajv = new Ajv2020({ strict: false });
  ajv.addSchema({ $id: "openapi.json", components: doc.components });
  for (const name of Object.keys(doc.components.schemas)) {
    expect(() => ajv.compile({ $ref: `openapi.json#/components/schemas/${name}` })).not.toThrow();
  }
  expect(Object.keys(doc.paths).sort()).toEqual([
    "/api/health",
    "/api/jobs",
    "/api/jobs/{id}",
    "/api/me",
    "/api/me/export",
    "/api/public-config",
    "/api/usage",
  ]);
});
