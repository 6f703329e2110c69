/**
 * The Auth (GoTrue) stand-in as `npm run dev` and the stack's tests run it: on its own port
 * (9999, GoTrue's own default), on the stack's database, signing user tokens the way the app
 * verifies them today (HS256 with the stack's JWT secret), its `iss` the project's
 * (`${SUPABASE_URL}/auth/v1`). The page reaches it through the app server's dev-only
 * `/auth/v1/*` pass-through (the page's CSP allows its own origin; a loopback http port it does
 * not), so the mailed links point at the app's origin too. The mailbox is at `/__mail` on this
 * port.
 */
import { jwtVerify, SignJWT } from "jose";
import pg from "pg";
import { type RunningGotrue, startGotrue } from "./gotrue-server.ts";

export interface StackAuth extends RunningGotrue {
  stop(): Promise<void>;
}

export async function startStackAuth(o: {
  port: number;
  databaseUrl: string;
  /** The app's origin: where the page is, the links land, and the page reaches Auth. */
  appUrl: string;
  /** `SUPABASE_URL`: the tokens' issuer hangs off it. */
  supabaseUrl: string;
  jwtSecret: string;
  apiKeys: string[];
}): Promise<StackAuth> {
  const pool = new pg.Pool({ connectionString: o.databaseUrl, max: 4 });
  pool.on("error", () => {});
  const secret = new TextEncoder().encode(o.jwtSecret);
  const keys = new Set(o.apiKeys);
  try {
    const running = await startGotrue({
      port: o.port,
      db: pool,
      publicUrl: o.appUrl,
      issuer: `${o.supabaseUrl.replace(/\/+$/, "")}/auth/v1`,
      siteUrl: o.appUrl,
      apiKeys: () => keys,
      sign: (claims) =>
        new SignJWT({ ...claims }).setProtectedHeader({ alg: "HS256", typ: "JWT" }).sign(secret),
      verify: async (token) => (await jwtVerify(token, secret, { algorithms: ["HS256"] })).payload,
    });
    return {
      ...running,
      async stop() {
        await running.close();
        await pool.end();
      },
    };
  } catch (error) {
    await pool.end();
    throw error;
  }
}
