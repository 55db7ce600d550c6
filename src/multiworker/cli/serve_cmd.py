"""``multiworker serve``: a job's exported model (or any SavedModel) over TF Serving's REST API."""

from __future__ import annotations

import json
import sys
from typing import Optional

import typer

__all__ = ["register"]


def serve(
    target: str = typer.Argument("last", metavar="JOB|SAVEDMODEL_DIR",
                                 help="Job id, unique prefix or `last` (serves <output>/model), or a SavedModel directory."),
    port: int = typer.Option(8501, "--port", "-p", min=1, max=65535, help="REST port (TF Serving's default)."),
    grpc_port: int = typer.Option(8500, "--grpc-port", min=0, max=65535,
                                  help="gRPC PredictionService port (TF Serving's default); 0: REST only."),
    host: str = typer.Option("127.0.0.1", "--host", help="Interface to listen on; 0.0.0.0 exposes it to the network."),
    name: Optional[str] = typer.Option(None, "--name", help="Model name in URLs (default: the job's name or the directory's)."),
    max_batch_size: int = typer.Option(32, "--max-batch-size", min=1, help="Most rows in one model call: concurrent requests are merged up to it, larger ones split."),
    batch_timeout: str = typer.Option("0", "--batch-timeout", help="Longest a batch that has company waits to fill (5ms, 500us, 0.01s); "
                                     "0 runs what is queued at once, TF Serving's advice on CPUs; a lone request never waits."),
    model_threads: int = typer.Option(0, "--model-threads", min=0, show_default=False,
                                      help="Model calls that may run at once, TF Serving's num_batch_threads (default: 1 with batching, "
                                           "as one call uses every core; 4 with --no-batching)."),
    max_queue: int = typer.Option(1000, "--max-queue", min=1, help="Requests waiting at most; more get 503."),
    max_request_size: str = typer.Option("64MB", "--max-request-size",
                                         help="Largest REST body or gRPC message (e.g. 64MB, 512KB); larger get 413."),
    max_connections: int = typer.Option(500, "--max-connections", min=1,
                                        help="Open connections (and gRPC calls in flight) at most; more get 503."),
    read_timeout: float = typer.Option(30.0, "--read-timeout", min=0.1,
                                       help="Seconds a client may take to send a request's headers, and its body."),
    no_batching: bool = typer.Option(False, "--no-batching", help="Run each request on its own."),
    as_json: bool = typer.Option(False, "--json", help="Print the URL and model as JSON once it serves."),
    verbose: bool = typer.Option(False, "--verbose", "-v", help="Also show TensorFlow's start-up log lines."),
) -> None:
    """Serve a trained model: TF Serving's REST API (:predict, :classify, :regress, metadata) and its gRPC
    PredictionService, and Vertex AI's prediction shape, with server-side batching and metrics at
    /monitoring/metrics. Ctrl-C stops it. See docs/serving.md."""
    from multiworker.cli.tf_quiet import import_tensorflow

    import_tensorflow(verbose=verbose)
    from multiworker.serve import BatchOptions
    from multiworker.serve.limits import Limits, parse_size
    from multiworker.serve.server import parse_duration_ms
    from multiworker.serve.server import serve as run_server

    options = BatchOptions(enabled=not no_batching, max_batch_size=max_batch_size,
                           timeout=parse_duration_ms(batch_timeout), max_queue=max_queue,
                           threads=model_threads or None)
    limits = Limits(max_request_bytes=parse_size(max_request_size), max_connections=max_connections,
                    read_timeout=read_timeout)

    def ready(url: str, servable) -> None:
        grpc = f"{host}:{grpc_port}" if grpc_port else None
        if as_json:
            typer.echo(json.dumps({"url": url, "grpc": grpc, "model_path": servable.path, "version": servable.version,
                                   "signatures": sorted(servable.signatures)}))
        else:
            typer.echo(f"Serving {servable.path} (version {servable.version}) at {url}  (Ctrl-C to stop)")
            typer.echo(f"  curl -d '{{\"instances\": [...]}}' {url}:predict")
            if grpc:
                typer.echo(f"  gRPC PredictionService at {grpc}")
        sys.stdout.flush()

    raise typer.Exit(run_server(target, host=host, port=port, grpc_port=grpc_port or None, name=name,
                                options=options, limits=limits, on_ready=ready))


def register(app: typer.Typer) -> None:
    app.command()(serve)
