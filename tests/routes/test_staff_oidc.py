"""OpenID Connect sign-in against a fake provider: no real identity provider runs here, so a small
one is served by uvicorn on a loopback port for the test (discovery, authorize, token with an
RS256-signed ID token and its nonce, JWKS). labserver's side is the real thing: Authlib's client
fetches the discovery document and the keys over HTTP, checks the signature, issuer, audience,
expiry and nonce, and the claims are mapped to roles by the rules
(``LABSERVER_STAFF__OIDC__ROLES``)."""

from __future__ import annotations

import secrets
import socket
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import parse_qs, urlencode, urlparse

import httpx
import pytest
import uvicorn
from fastapi import FastAPI, Form
from fastapi.responses import JSONResponse, RedirectResponse
from fastapi.testclient import TestClient
from joserfc import jwt
from joserfc.jwk import KeySet, RSAKey
from sqlmodel import Session

from labserver.app import create_app
from labserver.config import OidcSettings, Settings
from labserver.services.joining.events import create_event
from labserver.services.staff import oidc
from labserver.services.staff.roles import Grant, Role
from tests.conftest import EVENT_CODE

CLIENT_ID, CLIENT_SECRET = "labserver-test", "s3cret"


@dataclass
class FakeProvider:
    """The provider: ``user`` is who "signs in" at its authorize endpoint (no login form)."""

    url: str
    key: RSAKey
    user: dict[str, Any] = field(default_factory=dict)
    codes: dict[str, dict[str, Any]] = field(default_factory=dict)
    token_calls: int = 0

    def app(self) -> FastAPI:
        api = FastAPI()

        @api.get("/.well-known/openid-configuration")
        def discovery() -> dict[str, Any]:
            return {
                "issuer": self.url,
                "authorization_endpoint": f"{self.url}/authorize",
                "token_endpoint": f"{self.url}/token",
                "jwks_uri": f"{self.url}/jwks",
                "response_types_supported": ["code"],
                "subject_types_supported": ["public"],
                "id_token_signing_alg_values_supported": ["RS256"],
            }

        @api.get("/jwks")
        def jwks() -> dict[str, Any]:
            return KeySet([self.key]).as_dict(private=False)

        @api.get("/authorize")
        def authorize(client_id: str, redirect_uri: str, state: str, nonce: str = "") -> RedirectResponse:
            assert client_id == CLIENT_ID
            code = secrets.token_urlsafe(8)
            self.codes[code] = {"nonce": nonce, "user": dict(self.user)}
            return RedirectResponse(f"{redirect_uri}?{urlencode({'code': code, 'state': state})}", 302)

        @api.post("/token")
        def token(
            code: str = Form(""), client_id: str = Form(""), client_secret: str = Form("")
        ) -> JSONResponse:
            self.token_calls += 1
            grant = self.codes.pop(code, None)
            if grant is None:
                return JSONResponse({"error": "invalid_grant"}, status_code=400)
            now = int(time.time())
            claims = {
                "iss": self.url,
                "aud": CLIENT_ID,
                "iat": now,
                "exp": now + 300,
                "nonce": grant["nonce"],
                **grant["user"],
            }
            id_token = jwt.encode({"alg": "RS256", "kid": self.key.kid}, claims, self.key)
            return JSONResponse(
                {"access_token": "at", "token_type": "Bearer", "expires_in": 300, "id_token": id_token}
            )

        return api


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture
def provider() -> Iterator[FakeProvider]:
    port = _free_port()
    fake = FakeProvider(f"http://127.0.0.1:{port}", RSAKey.generate_key(2048, parameters={"kid": "k1"}))
    server = uvicorn.Server(uvicorn.Config(fake.app(), host="127.0.0.1", port=port, log_level="warning"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 20
    while not server.started:
        assert time.monotonic() < deadline and thread.is_alive(), "the fake provider did not start"
        time.sleep(0.02)
    try:
        yield fake
    finally:
        server.should_exit = True
        thread.join(10)


@pytest.fixture
def oidc_app(settings: Settings, provider: FakeProvider) -> FastAPI:
    settings.staff.oidc = OidcSettings(
        issuer=provider.url,
        client_id=CLIENT_ID,
        client_secret=CLIENT_SECRET,
        name="Example SSO",
        roles=["groups=workshop-ta:assistant@" + EVENT_CODE, "email=*@organisers.example:organiser"],
    )
    return create_app(settings)


def _sign_in(client: TestClient, provider: FakeProvider, user: dict[str, Any]) -> httpx.Response:
    provider.user = user
    away = client.get("/instructor/oidc/login", follow_redirects=False)
    assert away.status_code == 302 and away.headers["location"].startswith(provider.url)
    back = httpx.get(away.headers["location"], follow_redirects=False)
    assert back.status_code == 302
    callback = urlparse(back.headers["location"])
    return client.get(f"{callback.path}?{callback.query}", follow_redirects=False)


def test_fake_provider_a_group_claim_makes_an_assistant_of_one_event(
    oidc_app: FastAPI, provider: FakeProvider
) -> None:
    with Session(oidc_app.state.ctx.engine, expire_on_commit=False) as session:
        event = create_event(session, title="Meetup", labs=["getting-started"], code=EVENT_CODE)
        other = create_event(session, title="Other", labs=["getting-started"], code="OTHERCODE")
    with TestClient(oidc_app) as client:
        resp = _sign_in(
            client,
            provider,
            {"sub": "u-1", "name": "Tao", "email": "tao@uni.example", "groups": ["workshop-ta"]},
        )
        assert resp.status_code == 303, resp.text
        me = client.get("/api/v1/staff/me").json()
        assert me["name"] == "Tao" and me["roles"] == [{"role": "assistant", "event_id": event.id}]
        assert client.get(f"/api/v1/events/{event.id}/progress").status_code == 200
        assert client.get(f"/api/v1/events/{other.id}/progress").status_code == 403
        assert client.post(f"/api/v1/events/{event.id}/stop-all").status_code == 403
        assert [e["id"] for e in client.get("/api/v1/events").json()] == [event.id]
        # the same subject again: the same account, not a second one
        client.cookies.clear()
        assert (
            _sign_in(client, provider, {"sub": "u-1", "name": "Tao", "groups": ["workshop-ta"]}).status_code
            == 303
        )
        assert client.get("/api/v1/staff/me").json()["staff_id"] == me["staff_id"]


def test_fake_provider_no_matching_claim_is_refused_with_a_clear_message(
    oidc_app: FastAPI, provider: FakeProvider
) -> None:
    with TestClient(oidc_app) as client:
        resp = _sign_in(
            client, provider, {"sub": "u-2", "name": "Eve", "email": "eve@else.example", "groups": ["x"]}
        )
        assert resp.status_code == 403
        assert "gives you no role here" in resp.text and "Example SSO" in resp.text
        assert client.get("/api/v1/staff/me").status_code == 403


def test_fake_provider_a_token_with_the_wrong_nonce_is_refused(
    oidc_app: FastAPI, provider: FakeProvider
) -> None:
    """The nonce binds the ID token to this browser's round trip: a replayed code's token fails."""
    with TestClient(oidc_app) as client:
        provider.user = {"sub": "u-3", "email": "boss@organisers.example", "email_verified": True}
        away = client.get("/instructor/oidc/login", follow_redirects=False)
        back = httpx.get(away.headers["location"], follow_redirects=False)
        code = parse_qs(urlparse(back.headers["location"]).query)["code"][0]
        provider.codes[code]["nonce"] = "not-the-one-asked"
        callback = urlparse(back.headers["location"])
        resp = client.get(f"{callback.path}?{callback.query}", follow_redirects=False)
        assert resp.status_code == 403 and provider.token_calls == 1
        assert client.get("/api/v1/staff/me").status_code == 403


def test_role_rules_parse_and_map_claims() -> None:
    rule = oidc.parse_rule("email=*@example.org:instructor@meetup")
    assert (rule.claim, rule.pattern, rule.role, rule.event_code) == (
        "email",
        "*@example.org",
        Role.instructor,
        "MEETUP",
    )
    with pytest.raises(ValueError, match="claim=pattern:role"):
        oidc.parse_rule("groups")
    with pytest.raises(ValueError, match="organiser, instructor or assistant"):
        oidc.parse_rule("groups=x:boss")
    rules = [oidc.parse_rule("groups=ta:assistant@MEETUP"), oidc.parse_rule("groups=org*:organiser")]
    assert oidc.grants_for({"groups": ["ta", "org-team"]}, rules, {"MEETUP": 7}) == [
        Grant(Role.assistant, 7),
        Grant(Role.organiser, None),
    ]
    assert oidc.grants_for({"groups": "ta"}, rules, {}) == []  # an unknown event code gives nothing
