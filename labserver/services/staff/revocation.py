"""The staff watch's task (:class:`~labserver.services.staff.watch.StaffWatch` holds, this judges):
every ``LABSERVER_STAFF__REVOKE_POLL_S`` seconds, or at once when poked, each held stream, socket
and share's principal is read again from the database (one short session for all of them, in a
worker thread); a holder whose principal may no longer see its event is ended, and a share it
asked is ended as "<name> (signed out)"."""

from __future__ import annotations

from collections.abc import Callable

from sqlmodel import Session

from labserver.services.context import AppContext
from labserver.services.staff import accounts
from labserver.services.staff.roles import Principal
from labserver.services.staff.watch import still_allowed
from labserver.services.support import help_share
from labserver.terminals.sharing import Share, ShareState


async def keep_watch(ctx: AppContext) -> None:
    """The app's watch task: judges against the database every ``revoke_poll_s`` (module docstring)."""
    watch = ctx.staff_watch

    def judge(pairs: list[tuple[Principal, int]]) -> list[bool]:
        fresh: dict[str, Principal | None] = {}
        with Session(ctx.engine, expire_on_commit=False) as session:
            for principal, _event in pairs:
                if principal.key not in fresh:
                    fresh[principal.key] = accounts.principal_again(ctx.settings, session, principal)
        return [still_allowed(p, fresh[p.key], e) for p, e in pairs]

    def shares_of() -> list[tuple[Principal, int, Callable[[], None]]]:
        out: list[tuple[Principal, int, Callable[[], None]]] = []
        for share_id, (principal, event_id) in list(watch.askers.items()):
            share = ctx.shares.get(share_id)
            if share is None or share.state == ShareState.ended:
                watch.askers.pop(share_id, None)
                continue
            by = f"{principal.name} (signed out)"
            out.append((principal, event_id, _ender(ctx, share, by)))
        return out

    await watch.run(judge, shares_of, every_s=ctx.settings.staff.revoke_poll_s)


def _ender(ctx: AppContext, share: Share, by: str) -> Callable[[], None]:
    def end() -> None:
        help_share.end(ctx, share, by=by)

    return end
