// The header's selectors, kept for the browser tab (sessionStorage): the virtual host the
// lists show (RabbitMQ's "Virtual host" selector; "" for all) and how often pages refresh.

import { seg } from "./api.js";

const VHOST_KEY = "amqpd.vhost";
const REFRESH_KEY = "amqpd.refresh";

export const REFRESH_CHOICES = [
  [5000, "Refresh: 5 s"],
  [10000, "Refresh: 10 s"],
  [30000, "Refresh: 30 s"],
  [60000, "Refresh: 1 min"],
  [0, "Refresh: off"],
];

export function selectedVhost() {
  return sessionStorage.getItem(VHOST_KEY) || "";
}

export function setVhost(name) {
  if (name) sessionStorage.setItem(VHOST_KEY, name);
  else sessionStorage.removeItem(VHOST_KEY);
}

export function refreshInterval() {
  const stored = sessionStorage.getItem(REFRESH_KEY);
  return stored === null ? 5000 : Number(stored);
}

export function setRefreshInterval(ms) {
  sessionStorage.setItem(REFRESH_KEY, String(ms));
}

/**
 * A list path narrowed to the selected vhost: "/queues" or "/queues/%2F"; ``template``
 * where the vhost goes elsewhere ("/vhosts/{}/connections").
 */
export function scoped(path, template) {
  const vhost = selectedVhost();
  if (!vhost) return path;
  return template ? template.replace("{}", seg(vhost)) : `${path}/${seg(vhost)}`;
}

/** The history the charts ask the server for (ten minutes at 5 s, what it keeps). */
export const CHART_AGE = 600;
export const CHART_INCR = 5;

export function rangeQuery(...prefixes) {
  return prefixes.map((p) => `${p}_age=${CHART_AGE}&${p}_incr=${CHART_INCR}`).join("&");
}
