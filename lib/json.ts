/**
 * A JSON response. Plain TypeScript with no imports, so that the local app server, which Node
 * runs with its type stripping only, shares it with the functions.
 */

/**
 * Responses carry user data, so they are `Cache-Control: no-store` unless `headers` says
 * otherwise.
 *
 * @example json(202, { job, usage })
 */
export function json(
  status: number,
  body: unknown,
  headers: Record<string, string> = {},
): Response {
  return new Response(JSON.stringify(body), {
    status,
    headers: {
      "content-type": "application/json; charset=utf-8",
      "cache-control": "no-store",
      ...headers,
    },
  });
}
