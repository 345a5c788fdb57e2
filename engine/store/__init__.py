"""The database: where it lives and how to reach it, migrations, replicas, vector stores, API keys."""
