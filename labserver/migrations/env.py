from alembic import context
from sqlmodel import SQLModel

import labserver.models  # noqa: F401  (registers the tables)

target_metadata = SQLModel.metadata


def run_migrations_online() -> None:
    engine = context.config.attributes.get("engine")
    if engine is None:
        from labserver.config import Settings
        from labserver.db import make_engine

        engine = make_engine(Settings().sqlalchemy_url)
    with engine.connect() as connection:
        context.configure(
            connection=connection, target_metadata=target_metadata, render_as_batch=True, compare_type=True
        )
        with context.begin_transaction():
            context.run_migrations()
        connection.commit()


run_migrations_online()
