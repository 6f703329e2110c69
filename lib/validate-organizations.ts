/**
 * The organization routes' bodies (docs/flows/organizations.md): each refusal a 400 with its
 * code, before the database is asked.
 */
import * as z from "zod";
import { HttpError } from "./errors.ts";

const cap = z.union([z.int().min(0).max(2_000_000_000), z.null()]);

const invitation = z.strictObject({
  email: z.email().max(254),
  role: z.enum(["admin", "member"]).default("member"),
  cap: cap.default(null),
});

/** `{email, role?, cap?}`: an address, `admin` or `member` (default), a cap or null. */
export function parseInvitation(body: unknown): {
  email: string;
  role: "admin" | "member";
  cap: number | null;
} {
  const r = invitation.safeParse(body);
  if (!r.success)
    throw new HttpError(
      400,
      "invalid_invitation",
      '{"email": an address, "role": "admin" or "member", "cap": a whole number ≥ 0 or null} is expected.',
    );
  return { ...r.data, email: r.data.email.toLowerCase() };
}

/** `{cap}`: a whole number ≥ 0, or null for none. */
export function parseCap(body: unknown): number | null {
  const r = z.strictObject({ cap }).safeParse(body);
  if (!r.success)
    throw new HttpError(400, "invalid_cap", '"cap" must be a whole number ≥ 0, or null.');
  return r.data.cap;
}
