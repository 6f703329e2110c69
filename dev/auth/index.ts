/**
 * A local stand-in for Supabase Auth (GoTrue) under `/auth/v1`, mounted on the same origin as
 * the REST stand-in (as the Supabase gateway serves both from the project URL). It signs user
 * tokens with the project's key (project.ts) and serves what a verifier needs:
 *
 * - `GET /auth/v1/.well-known/jwks.json`: as GoTrue's `WellKnownJwks` answers it: 200
 *   `{"keys": [...]}` with the public asymmetric keys only (`use: "sig"`,
 *   `key_ops: ["verify"]`; the legacy HMAC secret is never listed, so a legacy project answers
 *   `{"keys": []}`), `Content-Type: application/json`, `Cache-Control: public, max-age=600`.
 *
 * Everything else under /auth/v1 is refused in GoTrue's error shape
 * (`{"code", "error_code", "msg"}`) with 404: sign-up, sign-in, verify and recover are not
 * served yet. A route is one entry of `ROUTES`, so they can be added beside the JWKS.
 */
import type { JWK } from "jose";
import { type ProjectFile, publicJwkOf } from "./project.ts";
import { type AccessTokenInput, signAccessToken } from "./tokens.ts";

export type { ProjectFile, ProjectShape } from "./project.ts";
export {
  LOCAL_JWT_SECRET,
  makeProject,
  prepareProject,
  projectFilePath,
  readProject,
  shapeFrom,
} from "./project.ts";
export { type AccessTokenInput, signAccessToken } from "./tokens.ts";

export interface AuthStandIn {
  project: ProjectFile;
  /** What `/.well-known/jwks.json` lists. */
  jwks(): { keys: JWK[] };
  /** Answers a request under `/auth/v1`. */
  handle(request: Request): Promise<Response>;
  /** A user token the project would issue at sign-in. */
  mint(input: AccessTokenInput): Promise<string>;
}

function gotrueJson(status: number, body: unknown, headers: Record<string, string> = {}) {
  return new Response(JSON.stringify(body), {
    status,
    headers: { "content-type": "application/json", ...headers },
  });
}

type Route = (request: Request, auth: AuthStandIn) => Promise<Response>;

const ROUTES: Record<string, Partial<Record<string, Route>>> = {
  "/auth/v1/.well-known/jwks.json": {
    GET: async (_request, auth) =>
      gotrueJson(200, auth.jwks(), { "cache-control": "public, max-age=600" }),
  },
};

export function createAuthStandIn(project: ProjectFile): AuthStandIn {
  const keys =
    project.shape === "new" && project.signingKey ? [publicJwkOf(project.signingKey)] : [];
  const auth: AuthStandIn = {
    project,
    jwks: () => ({ keys }),
    async handle(request) {
      const { pathname } = new URL(request.url);
      const route = ROUTES[pathname]?.[request.method === "HEAD" ? "GET" : request.method];
      if (route) return route(request, auth);
      return gotrueJson(404, {
        code: 404,
        error_code: "not_found",
        msg: `${request.method} ${pathname} is not served by the local Auth stand-in`,
      });
    },
    mint: (input) => signAccessToken(project, input),
  };
  return auth;
}
