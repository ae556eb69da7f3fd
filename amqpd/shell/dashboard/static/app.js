// The single-page dashboard: the login form, hash routing between pages, a refresh at the
// interval chosen in the header (five seconds by default, as RabbitMQ's UI), the virtual
// host selector, and the resource-alarm banner on every page.

import { ApiError, api, canMonitor, forget, isAdministrator, loggedIn, remember, session, username } from "./api.js";
import { bytes, h } from "./dom.js";
import { adminPage } from "./admin.js";
import { exchangePage, exchangesPage } from "./exchanges.js";
import { setOptions } from "./forms.js";
import { connectionPage, connectionsPage } from "./lists.js";
import { overviewPage } from "./overview.js";
import { queuePage, queuesPage } from "./queues.js";
import { REFRESH_CHOICES, refreshInterval, selectedVhost, setRefreshInterval, setVhost } from "./settings.js";
import { shovelsPage } from "./shovels.js";
const $ = (id) => document.getElementById(id);

let current = null; // {name, page}
let timer = null;
let generation = 0; // a page switch makes older refreshes' results stale

function notify(text, isError = false) {
  const status = $("status");
  status.textContent = text;
  status.className = isError ? "error" : "ok";
  status.hidden = false;
  clearTimeout(notify.timer);
  notify.timer = setTimeout(() => {
    status.hidden = true;
  }, 6000);
}

function route() {
  const parts = window.location.hash.replace(/^#\/?/, "").split("/");
  const [name = "", ...rest] = parts;
  switch (name) {
    case "queues":
      if (rest.length >= 2) {
        const vhost = decodeURIComponent(rest[0]);
        const queue = decodeURIComponent(rest.slice(1).join("/"));
        return { name: "queues", page: queuePage(vhost, queue, notify) };
      }
      return { name: "queues", page: queuesPage(notify) };
    case "exchanges":
      if (rest.length >= 2) {
        const vhost = decodeURIComponent(rest[0]);
        const exchange = decodeURIComponent(rest.slice(1).join("/"));
        return { name: "exchanges", page: exchangePage(vhost, exchange === "amq.default" ? "" : exchange, notify) };
      }
      return { name: "exchanges", page: exchangesPage(notify) };
    case "connections":
      if (rest.length >= 1 && rest[0]) {
        return { name: "connections", page: connectionPage(decodeURIComponent(rest.join("/")), notify) };
      }
      return { name: "connections", page: connectionsPage(notify) };
    case "channels":
      return { name: "connections", page: connectionsPage(notify) };
    case "shovels":
      return { name: "shovels", page: shovelsPage() };
    case "admin":
    case "users":
      return { name: "admin", page: adminPage(notify) };
    default:
      return { name: "overview", page: overviewPage(notify) };
  }
}

function showLogin(message) {
  generation += 1;
  clearTimeout(timer);
  $("nav").hidden = true;
  $("session").hidden = true;
  $("page").replaceChildren();
  $("alarms").hidden = true;
  const form = $("login");
  form.hidden = false;
  const error = $("login-error");
  error.hidden = !message;
  error.textContent = message || "";
  form.elements.username.focus();
}

/** Who is logged in (their tags decide what the dashboard offers); the API's answer. */
async function identify() {
  const who = await api("/whoami");
  const tags = who && who.tags;
  session.tags = Array.isArray(tags) ? tags : String(tags || "").split(",").filter(Boolean);
  document.querySelector('#nav a[data-page="admin"]').hidden = !isAdministrator();
  return who;
}

async function refreshAlarms() {
  const banner = $("alarms");
  if (!canMonitor()) {
    banner.hidden = true; // RabbitMQ shows node alarms to monitoring users and administrators
    return;
  }
  try {
    const nodes = await api("/nodes");
    const alarms = [];
    for (const node of nodes) {
      if (node.mem_alarm) {
        alarms.push(
          `Memory alarm on ${node.name}: ${bytes(node.mem_used)} used, the limit is ${bytes(node.mem_limit)}. Publishers are blocked.`,
        );
      }
      if (node.disk_free_alarm) {
        alarms.push(
          `Disk alarm on ${node.name}: ${bytes(node.disk_free)} free, the limit is ${bytes(node.disk_free_limit)}. Publishers are blocked.`,
        );
      }
    }
    banner.replaceChildren(...alarms.map((text) => h("div", { className: "alarm-line" }, h("b", {}, "Resource alarm "), text)));
    banner.hidden = alarms.length === 0;
  } catch (error) {
    if (error instanceof ApiError && error.status === 401) throw error;
    banner.hidden = true;
  }
}

/** The header's vhost selector lists the vhosts the user sees (the choice is kept). */
async function refreshVhosts() {
  const vhosts = await api("/vhosts?columns=name");
  const names = vhosts.map((v) => v.name);
  if (selectedVhost() && !names.includes(selectedVhost())) setVhost(""); // it was deleted
  setOptions($("vhost-select"), [["", "All"], ...names.map((n) => [n, n])], selectedVhost());
}

function schedule(mine) {
  const every = refreshInterval();
  if (mine === generation && every > 0) timer = setTimeout(refresh, every);
}

async function refresh() {
  const mine = generation;
  clearTimeout(timer);
  try {
    await refreshVhosts();
    await current.page.refresh();
    await refreshAlarms();
    if (mine !== generation) return;
    $("refreshed").textContent = `last at ${new Date().toLocaleTimeString()}`;
  } catch (error) {
    if (mine !== generation) return;
    if (error instanceof ApiError && error.status === 401) {
      // a page this user's tags do not allow ("Not administrator user"), or a session
      // whose credentials stopped working: only the second logs out
      let valid = true;
      try {
        await identify();
      } catch {
        valid = false;
      }
      if (mine !== generation) return;
      if (!valid) {
        forget();
        showLogin("Login failed or the session ended.");
        return;
      }
    }
    notify(error.message, true);
  }
  schedule(mine);
}

function show() {
  generation += 1;
  current = route();
  $("login").hidden = true;
  $("nav").hidden = false;
  $("session").hidden = false;
  $("who").textContent = `User ${username()}`;
  for (const link of document.querySelectorAll("#nav a")) {
    link.classList.toggle("active", link.dataset.page === current.name);
  }
  $("page").replaceChildren(current.page.element);
  $("refreshed").textContent = "loading";
  refresh();
}

async function login(event) {
  event.preventDefault();
  const form = event.currentTarget;
  remember(form.elements.username.value, form.elements.password.value);
  try {
    const who = await identify();
    form.reset();
    $("node-name").textContent = "";
    if (who && who.name) show();
  } catch (error) {
    forget();
    showLogin(error instanceof ApiError && error.status === 401 ? "Login failed" : error.message);
  }
}

async function nodeName() {
  try {
    const overview = await api("/overview");
    $("node-name").textContent = overview.node ? `node ${overview.node}` : "";
  } catch {
    $("node-name").textContent = "";
  }
}

$("login").addEventListener("submit", async (event) => {
  await login(event);
  if (loggedIn()) nodeName();
});
setOptions($("refresh-select"), REFRESH_CHOICES, refreshInterval());
function describeRefresh() {
  const every = refreshInterval();
  $("refresh-text").textContent = every ? `Refreshed every ${every / 1000} seconds` : "Not refreshed automatically";
}
describeRefresh();
$("refresh-select").addEventListener("change", (event) => {
  setRefreshInterval(Number(event.target.value));
  describeRefresh();
  if (loggedIn() && current) {
    generation += 1;
    refresh();
  }
});
$("vhost-select").addEventListener("change", (event) => {
  setVhost(event.target.value);
  if (loggedIn()) show(); // the page again, narrowed to that vhost
});
$("logout").addEventListener("click", () => {
  forget();
  showLogin("");
});
window.addEventListener("hashchange", () => {
  if (loggedIn()) show();
});
window.addEventListener("resize", () => {
  if (current && current.page.resize) current.page.resize();
});

async function start() {
  if (!loggedIn()) {
    showLogin("");
    return;
  }
  try {
    await identify();
  } catch {
    forget();
    showLogin("");
    return;
  }
  show();
  nodeName();
}

start();
