"""The Kubernetes backend, one module per idea: ``backend.py`` (:class:`KubernetesBackend`),
``manifests.py`` (pure manifests: pod, PVC, NetworkPolicy, ServiceAccount, card accounting),
``problems.py`` (what went wrong with a pod and the attendee's message, EN + ZH), ``api.py`` (the
official client, JSON in and out, retries through the one backoff helper), ``terminal.py`` (TTY exec
over the exec WebSocket), ``grader.py`` + ``grader_boot.py`` (tamper-proof checks in a grader pod)."""
