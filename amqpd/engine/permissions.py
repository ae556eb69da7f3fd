"""Where each permission is checked: RabbitMQ's ``rabbit_channel`` ``check_*_permitted`` calls.

`check_method` runs before a channel handles a decoded method (for users without full
access only; basic.publish checks ``write`` on the exchange itself, on the fast path).
The checks happen where RabbitMQ makes them, before the resource is looked up, so a user
without permission learns nothing about whether a resource exists:

=====================  ==========================================================
exchange.declare       configure on the exchange (not passive); creating one with an
                       alternate-exchange also needs read on it and write on the AE
exchange.delete        configure on the exchange
exchange.bind/unbind   write on the destination exchange, read on the source
queue.declare          configure on the queue (not passive); creating one with a
                       dead-letter exchange also needs read on it and write on the DLX
queue.delete           configure on the queue
queue.purge            read on the queue
queue.bind/unbind      write on the queue, read on the exchange
basic.consume, get     read on the queue
basic.publish          write on the exchange (in the channel)
=====================  ==========================================================

Names on the default exchange and the reserved ``amq.`` exchanges that the vhost refuses
anyway are left to the vhost, so the refusal text is the one RabbitMQ gives.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Final

from pamqp import commands as spec

from amqpd.engine.reply_to import REPLY_TO_QUEUE
from amqpd.engine.topology import Topology
from amqpd.model.auth import Authz
from amqpd.model.vhost import generated_name


def check_method(topology: Topology, authz: Authz, index: int, method: Any) -> None:
    """Raise 403 ACCESS_REFUSED if ``authz`` does not allow ``method`` on the channel whose
    exchange and queue methods ``topology`` handles (it resolves empty queue names)."""
    check = _CHECKS.get(index)
    if check is not None:
        check(topology, authz, method)


def _exchange_declare(topology: Topology, authz: Authz, method: spec.Exchange.Declare) -> None:
    name = method.exchange
    if method.passive or not name:
        return
    authz.configure("exchange", name)
    alternate = (method.arguments or {}).get("alternate-exchange")
    if isinstance(alternate, str) and name not in topology.vhost.exchanges:
        authz.read("exchange", name)
        authz.write("exchange", alternate)


def _exchange_delete(_topology: Topology, authz: Authz, method: spec.Exchange.Delete) -> None:
    name = method.exchange
    if name and not name.startswith("amq."):
        authz.configure("exchange", name)


def _exchange_bind(
    _topology: Topology, authz: Authz, method: spec.Exchange.Bind | spec.Exchange.Unbind
) -> None:
    authz.write("exchange", method.destination)
    if method.source and method.destination:
        authz.read("exchange", method.source)


def _queue_declare(topology: Topology, authz: Authz, method: spec.Queue.Declare) -> None:
    if method.passive:
        return
    # A server-named queue is checked under a name of the form it will get (amq.gen-…).
    name = method.queue or generated_name("amq.gen-")
    authz.configure("queue", name)
    dlx = (method.arguments or {}).get("x-dead-letter-exchange")
    if isinstance(dlx, str) and name not in topology.vhost.queues:
        authz.read("queue", name)
        authz.write("exchange", dlx)


def _queue_configure(topology: Topology, authz: Authz, method: spec.Queue.Delete) -> None:
    authz.configure("queue", topology.queue_name(method.queue))


def _queue_read(
    topology: Topology, authz: Authz, method: spec.Queue.Purge | spec.Basic.Get | spec.Basic.Consume
) -> None:
    name = topology.queue_name(method.queue)
    if name != REPLY_TO_QUEUE:
        authz.read("queue", name)


def _queue_bind(
    topology: Topology, authz: Authz, method: spec.Queue.Bind | spec.Queue.Unbind
) -> None:
    authz.write("queue", topology.queue_name(method.queue))
    if method.exchange:
        authz.read("exchange", method.exchange)


_CHECKS: Final[dict[int, Callable[[Topology, Authz, Any], None]]] = {
    spec.Exchange.Declare.index: _exchange_declare,
    spec.Exchange.Delete.index: _exchange_delete,
    spec.Exchange.Bind.index: _exchange_bind,
    spec.Exchange.Unbind.index: _exchange_bind,
    spec.Queue.Declare.index: _queue_declare,
    spec.Queue.Delete.index: _queue_configure,
    spec.Queue.Purge.index: _queue_read,
    spec.Queue.Bind.index: _queue_bind,
    spec.Queue.Unbind.index: _queue_bind,
    spec.Basic.Consume.index: _queue_read,
    spec.Basic.Get.index: _queue_read,
}
