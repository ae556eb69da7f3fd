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
