// The types of the bundled auth-js (public/vendor/auth-js.js), from the installed package.
export {
  GoTrueClient,
  isAuthApiError,
  isAuthError,
  isAuthImplicitGrantRedirectError,
  isAuthRetryableFetchError,
  isAuthWeakPasswordError,
} from "@supabase/auth-js";
