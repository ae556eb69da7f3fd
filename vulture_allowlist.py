"""Names vulture reports as unused that are used (vulture's ``--make-whitelist`` format).

vulture reads this file with the code (``[tool.vulture]`` in pyproject.toml; tests/
test_dead_code.py runs it): a name written here counts as used. Each entry says who uses
it. Add one only for a use vulture cannot see (a framework or library calls it, it is
looked up by value or by name, it is documented public API of a client library); code that
only tests call is dead code: delete it instead. Regenerate the candidates with
``vulture --make-whitelist``. This file is never imported.
"""

# ruff: noqa: B018, F821

# -- amqpd -----------------------------------------------------------------------------------
_.format  # KeyValueFormatter.format overrides logging.Formatter.format (amqpd/cli/logs.py)
OK  # ReplyCode.OK (200): found by value, reply_name(200) / ReplyCode(code) (amqpd/wire/errors.py)
# embedding API, a broker in a background thread; tests/conftest.py runs every test server
background_server  # through it (amqpd/shell/server.py)
# statistics counters: read by name through Counters.FIELDS (amqpd/model/statistics.py) when
# the inventory renders message_stats and the sampler computes rates (amqpd/engine/)
_.drop_unroutable
_.get_empty
_.publish_in
_.publish_out
_.return_unroutable
_.deliver_get
_.capture_signals  # overrides uvicorn.Server.capture_signals (amqpd/shell/http_listener.py)
_.should_exit  # uvicorn.Server.should_exit, read by uvicorn's main loop (http_listener.py)
_.ticket  # Basic.Get's deprecated ticket, set so the pamqp object is whole (wire/codec.py)
_.data_received  # asyncio.Protocol callback, called by the transport (shell/socket_protocol.py)

# -- interop.jms: public API documented in docs/jms.md, called by applications ----------------
_.from_url  # ConnectionFactory.from_url (interop/jms/connection.py)
_.create_connection  # ConnectionFactory.create_connection (interop/jms/connection.py)
_.create_session  # Connection.create_session (interop/jms/connection.py)
_.create_producer  # Session.create_producer (interop/jms/session.py)
_.create_consumer  # Session.create_consumer (interop/jms/session.py)
_.create_durable_subscriber  # Session.create_durable_subscriber (interop/jms/session.py)
_.transaction  # Session.transaction(), the `with` form of commit/rollback (interop/jms/session.py)
_.receive_no_wait  # MessageConsumer.receive_no_wait (interop/jms/consumer.py)
_.create_message  # Session.create_message, JMS message factory (interop/jms/session.py)
_.create_text_message  # Session.create_text_message (interop/jms/session.py)
_.create_bytes_message  # Session.create_bytes_message (interop/jms/session.py)
_.create_map_message  # Session.create_map_message (interop/jms/session.py)
_.create_browser  # Session.create_browser, JMS QueueBrowser (interop/jms/session.py)
_.broker_url  # Connection.broker_url, the broker a failover connection is on (connection.py)
_.add_transport_listener  # Connection.add_transport_listener (interop/jms/connection.py)
_.remove_transport_listener  # Connection.remove_transport_listener (interop/jms/connection.py)
# dataclass fields filled by name from the `consumer.*` destination options of docs/jms.md
# (ConsumerOptions.parse); accepted for ActiveMQ compatibility, read by no rule
dispatch_async  # consumer.dispatchAsync (interop/jms/destinations.py)
maximum_pending_message_limit  # consumer.maximumPendingMessageLimit (interop/jms/destinations.py)
retroactive  # consumer.retroactive (parse refuses true) (interop/jms/destinations.py)
# dataclass field set by name from jms.prefetchPolicy.queueBrowserPrefetch (docs/jms.md)
queue_browser_prefetch  # PrefetchPolicy.queue_browser_prefetch (interop/jms/policies.py)
# pika reads it when it opens the connection
_.credentials  # pika.ConnectionParameters.credentials (interop/jms/connection.py)

# -- interop.perf: used by the benchmark script tests/perf/compare.py (docs/perf.md) -----------
top_functions  # interop/perf/profiles.py
format_table  # interop/perf/profiles.py

# -- interop.spark: called by PySpark or read by pika ----------------------------------------
__getattr__  # module __getattr__ (PEP 562): lazy interop.spark.AmqpDataSource (needs pyspark)
_.streamWriter  # pyspark DataSource.streamWriter, called by Spark (interop/spark/datasource.py)
_.streamReader  # pyspark DataSource.streamReader, called by Spark (interop/spark/stream_source.py)
_.initialOffset  # pyspark DataSourceStreamReader.initialOffset, called by Spark (stream_source.py)
_.getDefaultReadLimit  # pyspark DataSourceStreamReader (4.2+), called by Spark (stream_source.py)
_.prepareForTriggerAvailableNow  # pyspark SupportsTriggerAvailableNow, called by Spark
_.latestOffset  # pyspark DataSourceStreamReader.latestOffset, called by Spark (stream_source.py)
_.partitions  # pyspark DataSourceReader/DataSourceStreamReader.partitions, called by Spark
_.abort  # pyspark DataSourceWriter/DataSourceStreamWriter.abort, called by Spark (writer.py)
_.socket_timeout  # pika.ConnectionParameters, read by pika (preflight.py, link.py)
_.stack_timeout  # pika.ConnectionParameters, read by pika (preflight.py, link.py)
_.blocked_connection_timeout  # pika.ConnectionParameters, read by pika (same)
_._activeSession  # pyspark SparkSession._activeSession, read by PySpark (session.py)

# -- parameters a protocol fixes ---------------------------------------------------------------
tb  # the traceback argument of __exit__ / __aexit__ (interop/jms/messages.py, persistence/store.py)

# -- amqpd: used only where vulture does not look ---------------------------------------------
buffered  # FrameReader.buffered: tests assert a reader keeps no bytes (test_codec, test_engine)
next_frame  # FrameReader.next_frame: the perf clients and tests (the broker: next_payload)
_.require_policymaker  # management auth: for the policies endpoints (operations work)
_.redirect_slashes  # Starlette's Router reads it (management app: answer, never redirect)

# -- amqpd.shell: called by libraries ----------------------------------------------------------
_.collect  # prometheus_client Collector.collect, called by generate_latest (shell/metrics.py)

# -- amqpd.model.federation: the queue links' accessor (the fedqueues branch uses it)
_.upstream_queue  # Upstream.upstream_queue (queue links)

# -- amqpd.buildinfo: the import system calls it
_.find_spec  # SourceFinder.find_spec, a sys.meta_path finder (loads compiled modules' sources)

# -- amqpd.shell.streams: where a memory-only broker's streams are (tests and operators)
_.storage_root  # StreamFiles.storage_root (tests/integration/test_streams.py)

# -- persistence.stream.log: the decoded view of a chunk (the broker reads them undecoded)
_.next_chunk  # LogReader.next_chunk (tests/unit/test_stream_log.py)

# -- amqpd.shell.peers: the stream of a connection handed to another worker implements
# anyio's ByteStream, whose send_eof is abstract (nothing calls it on this one)
_.send_eof  # _Forgotten.send_eof

# -- issue 26 stage 2: the sending half of the links between workers (amqpd/shell/workers/
# forward_outbox.py) is not called by the engine yet (the owner's half runs: amqpd/shell/
# workers/forward_links.py); tests/integration/test_forward_outbox.py, tests/unit/
# test_forwarding.py, test_shard_confirms.py and tests/perf/multicore_prototype.py use these
# until the routing step calls them (docs/multicore.md "Stage 2: what is left", step 3)
Forwarder  # amqpd.shell.workers.forward_outbox: every link from a worker to the others
PROMISED  # amqpd.wire.forwarding: the flag for a publish whose publisher waits
NO_EXPIRY  # amqpd.wire.forwarding: expiration_ms of a message without a TTL
NO_PRIORITY  # amqpd.wire.forwarding: priority of a message without one
_.local_done  # ShardConfirms.local_done (the publishing worker's own storage batch)
