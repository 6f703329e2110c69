/** Tests use the stack's own port helper. */
export { freePort } from "../../dev/ports.ts";
