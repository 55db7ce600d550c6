"""A local Cloud Storage stand-in for ``--map-path gs://BUCKET=DIR``: every ``gs://`` access a replica
makes (TensorFlow's own GCS filesystem, google-cloud-storage, gcsfs) lands in the mapped directories.

``buckets``: object names <-> files under the mapped directories (pure filesystem).
``gcs_api``: the JSON API subset the clients use, over ``buckets`` (a Starlette app).
``tls``: a per-job CA and a certificate for Google's storage hosts.
``proxy``: an HTTPS CONNECT proxy that sends Google's storage hosts to the stand-in.
``server``: the stand-in process (``python -m multiworker.storage.server``).
``standin``: the launcher's side: start it for a job, the replicas' environment, stop it.
"""
