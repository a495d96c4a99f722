"""Simulated users who hold conversations: a turn, its reply, think time, the next turn.

Shared by the closed loop (``stress.load.closed``: N users from a ramp-up, for the
scenario's rounds) and open-loop sessions (``stress.load.arrivals``: each session for the
rounds it drew, from its admission); the model says when a user's first turn is due, how
many rounds it has and how it thinks (``_plan``), and what its end means (``_user_ended``).

A user's turn is scheduled at an absolute time (its first at the model's time, then
previous reply + think time); the record keeps both that time and the real send time, so
client-side queueing or event-loop lag is visible rather than hidden in the latency.
"""

from __future__ import annotations

import asyncio
import random
import time
from array import array
from dataclasses import dataclass

from stress.config.scenario import ThinkTime
from stress.core.events import RunEvent
from stress.core.record import RequestRecord
from stress.core.tokens import count_tokens
from stress.load.conversation import MESSAGE_OVERHEAD, Conversation, History, build_history
from stress.load.corpus import Excerpt
from stress.load.turns import (
    START_BATCH,
    LoadModel,
    LoadSetup,
    build_body,
    request_id,
    shard_users,
)
from stress.net.reply import Reply


def think_seconds(rng: random.Random, spec: ThinkTime) -> float:
    if spec.distribution == "constant":
        return spec.mean if spec.mean is not None else spec.min
    if spec.distribution == "exponential":
        value = rng.expovariate(1.0 / spec.mean) if spec.mean else 0.0
        return min(max(value, spec.min), spec.max) if spec.max > 0 else max(value, spec.min)
    return rng.uniform(spec.min, spec.max)


@dataclass(slots=True)
class Plan:
    """What the load model decides about one user's turns."""

    t_first: float
    """Perf time of the first turn."""
    rounds: int | None
    """Rounds to send (None: until the run stops starting turns)."""
    think: ThinkTime
    warm_until: float = 0.0
    """Turns scheduled before this perf time are warm-up."""
    leaves: bool = False
    """After its last round the user leaves at once (a session), rather than thinking."""


@dataclass(slots=True)
class _Ahead:
    """The parts of a user's next turn that its reply does not decide, prepared after this
    turn's requests went out, while the reply streams (``ChatUsers._prepare_ahead``): the
    turnaround from a reply's end to the next request then holds only what the reply
    decides. Taken or, when not ready, made on the spot; either way the same."""

    user: int
    rng: random.Random
    """The user's paste draws, a stream of their own: the k-th paste is the same whether
    it was drawn ahead or on the spot."""
    paste: Excerpt | None = None
    conversation: Conversation | None = None
    want_paste: bool = False
    """The next turn pastes whatever the reply (``paste_on: every``)."""
    next_index: int = 0
    """The index of the conversation a rollover would open next."""


@dataclass(slots=True)
class _Talk:
    """A user's conversation across its turns, and what its current turn said."""

    user: int
    rng: random.Random
    """The user's questions and think times."""
    ahead: _Ahead
    conv: Conversation
    conv_index: int = 1
    user_text: str = ""
    """The current turn's user message."""
    user_tokens: int = 0
    """Its tokens, as the conversation counts them."""


class ChatUsers(LoadModel):
    """Users each holding a conversation, one task per user (``_user``)."""

    def __init__(self, setup: LoadSetup) -> None:
        super().__init__(setup)
        self._users = shard_users(self.sc.users.count, self.shard)
        self._ahead: list[_Ahead] = []
        """Users whose next turn is to be prepared when the loop next turns."""
        self._histories: dict[int, History] = {}
        """Pre-built history of each user's first conversation (taken when it starts)."""
        self._ask_tokens: dict[str, int] = {}
        """Tokens of each question the scenario asks (its ``ask:`` list), counted once."""

    # --- what the model decides --------------------------------------------------------

    def _plan(self, u: int) -> Plan:
        """When user ``u``'s first turn is due, its rounds, how it thinks (every model
        of users has its own)."""
        raise NotImplementedError

    def _warmup_rounds_done(self, u: int) -> None:
        """User ``u`` starts its first round after the scenario's warm-up rounds."""

    def _user_ended(self, u: int, rounds_done: int, reason: str) -> None:
        """User ``u``'s task ends; ``reason``: stopped (its turns ended: its rounds done, or
        the run stopping), cancelled or crashed."""

    # --- one user ----------------------------------------------------------------------

    async def _user(self, u: int) -> None:
        done = [0]  # rounds sent (a session's record of how far it got)
        reason = "stopped"
        try:
            await self._user_turns(u, done)
        except asyncio.CancelledError:
            reason = "cancelled"
        except Exception as e:  # a bug must not take the run down: record it, stop this user
            self.recorder.event(
                RunEvent(
                    self.now(),
                    "user_crashed",
                    f"user {u} stopped: {type(e).__name__}: {e}",
                    "error",
                    user=u,
                )
            )
            reason = "crashed"
        finally:
            self._user_ended(u, done[0], reason)

    async def _user_turns(self, u: int, done: list[int]) -> None:
        plan = self._plan(u)
        rounds, t_next = plan.rounds, plan.t_first
        if not await self._sleep_until(t_next):
            return
        talk = self._open_talk(u)
        ahead = talk.ahead
        rnd = 0
        while not self.stop_new.is_set():
            if rounds is not None and rnd >= rounds:
                break
            rnd += 1
            done[0] = rnd
            if rnd == self._warm_rounds + 1 and self._warm_rounds:
                self._warmup_rounds_done(u)
            rec, body = self._turn(talk, rnd, t_next < plan.warm_until)
            token_times: array[float] = array("d")  # when each text chunk arrived
            if rounds is None or rnd < rounds:  # a next turn may come: prepare its parts
                ahead.next_index = talk.conv_index + 1
                self._ahead.append(ahead)
                self._schedule_later()
            try:
                reply = await self.client.chat(body, rec, t_next, token_times)
            except Exception as e:
                self._client_failed(rec, e)
                raise
            finally:
                self._finish(rec, token_times, defer=True)
            self._take_reply(talk, rec, reply)
            if plan.leaves and rnd >= (rounds or 0):
                break  # the session's last round: it leaves without thinking again
            t_next = time.perf_counter() + think_seconds(talk.rng, plan.think)
            if rec.error_class == "http_429" and rec.retry_after_s:
                t_next = max(t_next, time.perf_counter() + rec.retry_after_s)
            self.live.set_state(u, "thinking", until=t_next - self.t0)
            if not await self._sleep_until(t_next):
                break

    def _open_talk(self, u: int) -> _Talk:
        """User ``u``'s first conversation (with its pre-built history, if any)."""
        sc = self.sc
        conv = self._new_conversation(u, 1)
        history = self._histories.pop(u, None)
        if history is not None:  # the first conversation only
            conv.prefill(history)
        turn = sc.conversation.turn
        ahead = _Ahead(u, random.Random(f"{sc.seed}:{u}:paste"))
        ahead.want_paste = turn.paste is not None and self.corpus is not None
        ahead.want_paste &= turn.paste_on == "every"
        return _Talk(u, random.Random(f"{sc.seed}:{u}"), ahead, conv)

    def _turn(self, talk: _Talk, rnd: int, warm: bool) -> tuple[RequestRecord, bytes]:
        """Round ``rnd``'s request (a paste, a question, the conversation so far), its
        record announced as sent; ``warm``: scheduled in the model's warm-up."""
        spec = self.sc.conversation
        conv = talk.conv
        excerpt = None
        pastes = spec.turn.paste_on == "every" or conv.turns == 0
        if spec.turn.paste is not None and self.corpus is not None and pastes:
            ahead = talk.ahead
            excerpt, ahead.paste = ahead.paste or self._draw_paste(ahead), None
        question = talk.rng.choice(spec.turn.ask)
        q_tokens = self._ask_tokens.get(question)
        if q_tokens is None:  # each question of the scenario is counted once per run
            q_tokens = self._ask_tokens[question] = count_tokens(question)
        added = (excerpt.tokens if excerpt else 0) + q_tokens + MESSAGE_OVERHEAD
        if conv.turns > 0 and conv.known_tokens() + added > spec.ceiling_tokens:
            conv = self._roll_over(talk)
        user_text = talk.user_text = conv.user_message(excerpt.text if excerpt else None, question)
        messages = conv.request_messages(user_text)
        # the message's parts are counted already: paste + "\n\n" + question (the
        # shared cache's first message carries a marker: counted whole, once)
        if conv.cache == "shared" and len(conv.messages) == 1:
            user_tokens = count_tokens(user_text)
        else:
            user_tokens = (excerpt.tokens + 1 if excerpt else 0) + q_tokens
        talk.user_tokens = user_tokens
        # a turn that sends pre-built history is warm-up: the server sees it all at once
        prefilled = conv.prefilled_tokens if conv.turns == 0 else 0
        rec = RequestRecord(
            user=talk.user,
            conversation=talk.conv_index,
            round=rnd,
            turn=conv.turns + 1,
            warmup=rnd <= self.sc.warmup.rounds or prefilled > 0 or warm,
            prompt_tokens_est=conv.tokens_est + user_tokens + MESSAGE_OVERHEAD,
            reusable_tokens=conv.reusable_tokens() if spec.cache != "cold" else 0,
            conversation_tokens=conv.known_tokens() + added,
            paste_tokens=excerpt.tokens if excerpt else 0,
            prefilled_tokens=round(prefilled / self.paste_scale),
        )
        rec.phase = self.phase
        rec.request_id = request_id(self.nonce, talk.user, rnd)
        body = build_body(self.sc, self.model, messages)
        self.live.on_send(rec)
        self.recorder.request_started(rec)
        return rec, body

    def _take_reply(self, talk: _Talk, rec: RequestRecord, reply: Reply) -> None:
        """The reply joins the conversation; a refusal as too long opens a new one."""
        conv = talk.conv
        if rec.outcome in ("ok", "reasoning_only"):
            # the server's count of the reply, when it gave one for what is kept
            served = rec.tokens_source == "usage" and (not reply.reasoning or conv.keep_reasoning)
            conv.commit_turn(
                talk.user_text,
                reply.content,
                reply.reasoning,
                rec.prompt_tokens,
                user_tokens=talk.user_tokens,
                reply_tokens=rec.completion_tokens if served else None,
            )
        elif rec.error_class == "context_exceeded":
            if rec.prompt_tokens is not None and rec.prompt_source != "estimate":
                size = f"{rec.prompt_tokens:,}-token (server's count)"
            else:
                size = f"~{rec.conversation_tokens:,}-token (stress's estimate)"
            u = talk.user
            self.recorder.event(
                RunEvent(
                    self.now(),
                    "context_exceeded",
                    f"user {u}: server refused a {size} conversation as too long; "
                    "starting a new conversation (lower conversation.ceiling_tokens)",
                    "warning",
                    user=u,
                )
            )
            self._roll_over(talk)

    def _roll_over(self, talk: _Talk) -> Conversation:
        """The user's next conversation: the one prepared ahead, else a new one."""
        talk.conv_index += 1
        index = talk.conv_index
        ahead = talk.ahead
        conv, ahead.conversation = ahead.conversation, None
        if conv is None or conv.index != index:
            conv = self._new_conversation(talk.user, index)
        talk.conv = conv
        return conv

    def _draw_paste(self, ahead: _Ahead) -> Excerpt:
        """The user's next paste, from its own stream of draws."""
        assert self.corpus is not None
        return self.corpus.excerpt(ahead.rng, *self._paste_budget())

    def _later(self) -> None:
        """What waits for the loop's next turn, after this turn's requests went out: the
        records of requests that ended ``ok`` (``_finish``) and the next turns' parts
        (``_prepare_ahead``). With no think time, the users whose replies ended together
        send one after the other, and whatever sits between two of those sends delays
        the second: on a server that paces each stream from its request's arrival, that
        spread the streams over more wakes of both processes (docs/performance.md)."""
        self._later_due = False
        self._write_ended()
        self._prepare_ahead()

    def _prepare_ahead(self) -> None:
        """Draw the next paste and make the conversation a rollover would open, for each
        user whose request just went out. A failure here is left to the user's own turn,
        which makes the part on the spot and meets it there (``user_crashed``)."""
        todo, self._ahead = self._ahead, []
        if self.stop_new.is_set():
            return
        for ahead in todo:
            try:
                if ahead.want_paste and ahead.paste is None:
                    ahead.paste = self._draw_paste(ahead)
                conv = ahead.conversation
                if conv is None or conv.index != ahead.next_index:
                    ahead.conversation = self._new_conversation(ahead.user, ahead.next_index)
            except Exception:  # the user's turn makes the part on the spot and says why
                continue

    def _new_conversation(self, u: int, index: int) -> Conversation:
        spec = self.sc.conversation
        return Conversation(
            user=u,
            index=index,
            cache=spec.cache,
            run_nonce=self.nonce,
            system_prompt=spec.system_prompt,
            keep_reasoning=spec.keep_reasoning,
        )

    # --- pre-built history -------------------------------------------------------------

    async def _prepare(self) -> None:
        """Build every user's ``start_tokens`` of history before the first user starts, in
        worker threads: tokenizing it on the loop would stall everyone's streams, and doing
        it at the user's ramp time would show up as client queueing in its first turn."""
        start = self.sc.conversation.start_tokens
        if start is None or start[1] == 0 or self.corpus is None or self.stop_new.is_set():
            return
        self._show("building histories")
        t = time.perf_counter()
        users = self._users
        batch = 4 * START_BATCH
        for first in range(0, len(users), batch):
            if self.stop_new.is_set():
                return
            part = users[first : first + batch]
            built = await asyncio.gather(
                *(asyncio.to_thread(self._history, u, start) for u in part)
            )
            self._histories.update(
                (u, h) for u, h in zip(part, built, strict=True) if h is not None
            )
        if not self._histories:
            return
        self._warm_rounds = max(self._warm_rounds, 1)  # for the live view's state only
        tokens = sum(h.tokens for h in self._histories.values())
        server_tokens = round(tokens / self.paste_scale)
        self.recorder.event(
            RunEvent(
                self.now(),
                "histories_built",
                f"{len(self._histories)} users' first conversations open with pre-built "
                f"history (~{server_tokens // len(self._histories):,} tokens each, "
                f"built in {time.perf_counter() - t:.1f}s); their first turn is warm-up",
                "info",
                data={"users": len(self._histories), "tokens": server_tokens, "phase": self.phase},
            )
        )

    def _history(self, u: int, start: tuple[int, int]) -> History | None:
        """User ``u``'s pre-built history, from its own seed: unique to the user, the same
        on every run with the same seed (the markers still keep runs apart)."""
        rng = random.Random(f"{self.sc.seed}:{u}:start")
        target = rng.randint(*start)
        if target <= 0 or self.corpus is None:
            return None
        turn = self.sc.conversation.turn
        reply_max = max(1, round(self.sc.request.max_tokens * self.paste_scale))
        return build_history(
            self.corpus,
            rng,
            round(target * self.paste_scale),
            self._paste_budget(),
            turn.ask,
            reply_max,
        )

    def _paste_budget(self) -> tuple[int, int]:
        """The paste's [min, max] in local-tokenizer tokens (the scenario's are the server's)."""
        paste = self.sc.conversation.turn.paste
        if paste is None:
            return (1, 1)
        lo = max(1, round(paste.tokens[0] * self.paste_scale))
        return lo, max(lo, round(paste.tokens[1] * self.paste_scale))
