// The management API as the dashboard calls it: HTTP basic authentication with the
// credentials the login form kept in sessionStorage (as RabbitMQ's UI does), JSON in
// and out, RabbitMQ's {"error", "reason"} bodies turned into ApiError.

const KEY = "amqpd.credentials";

export class ApiError extends Error {
  constructor(status, reason) {
    super(reason || `HTTP ${status}`);
    this.status = status;
  }
}

// the logged-in user's tags (from /api/whoami): what the pages may ask for
export const session = { tags: [] };

/** Administrators and monitoring users may read the node (memory, alarms, descriptors). */
export function canMonitor() {
  return session.tags.includes("administrator") || session.tags.includes("monitoring");
}

export function isAdministrator() {
  return session.tags.includes("administrator");
}

export function loggedIn() {
  return sessionStorage.getItem(KEY) !== null;
}

export function username() {
  const stored = sessionStorage.getItem(KEY);
  if (stored === null) return "";
  const text = decodeURIComponent(escape(atob(stored)));
  return text.slice(0, text.indexOf(":"));
}

export function remember(user, password) {
  sessionStorage.setItem(KEY, btoa(unescape(encodeURIComponent(`${user}:${password}`))));
}

export function forget() {
  sessionStorage.removeItem(KEY);
}

/** One path segment: the vhost "/" becomes %2F, as the API expects. */
export function seg(text) {
  return encodeURIComponent(text);
}

export async function api(path, { method = "GET", body, headers = {} } = {}) {
  const init = {
    method,
    // "omit": a 401 comes back to the page instead of opening the browser's own login
    // dialog (the API answers 401 with WWW-Authenticate: Basic, as RabbitMQ's does)
    credentials: "omit",
    headers: { ...headers, Authorization: `Basic ${sessionStorage.getItem(KEY) || ""}` },
  };
  if (body !== undefined) {
    init.body = JSON.stringify(body);
    init.headers["Content-Type"] = "application/json";
  }
  const response = await fetch(`api${path}`, init);
  const text = await response.text();
  let data = null;
  if (text) {
    try {
      data = JSON.parse(text);
    } catch {
      data = null;
    }
  }
  if (!response.ok) {
    const reason = data && (data.reason || data.error);
    throw new ApiError(response.status, reason);
  }
  return data;
}
