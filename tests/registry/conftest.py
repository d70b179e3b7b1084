from .exports import mlp_package  # noqa: F401  (a fixture shared by the registry tests)
