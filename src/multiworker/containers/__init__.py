"""Container images and engines: find a builder or runtime that works (docker, podman, buildah),
build a job's image (its own Dockerfile or a generated one), push it, and the Vertex AI prebuilt
images' end-of-availability dates. The ``containers`` backend runs replicas through :mod:`.engine`."""
