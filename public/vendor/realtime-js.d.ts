// The types of the bundled realtime-js (public/vendor/realtime-js.js), from the installed package.
export { RealtimeClient } from "@supabase/realtime-js";
