/**
 * Which events of one subject a debounced, cooled-down expectation may fire, worked out from the
 * events' committed times as the library decides it (see docs/concepts/durable-bus.md: an event less than
 * `debounceMs` after the window's last joins it, the window fires its last event at that event's
 * time + `debounceMs`, the subject then ignores events for `cooldownMs`). A decision that falls
 * within a tolerance of its boundary could go either way on a loaded machine (a late read closes
 * a window by its timer), so both branches are followed: the result is every set of events that
 * a correct cluster could have fired.
 */
export interface TimedEvent {
  eventId: string;
  at: number;
}

/** A join is doubtful this close to the debounce boundary; a cooldown decision this close to its end. */
const JOIN_TOLERANCE_MS = 400;
const COOL_TOLERANCE_MS = 150;

interface State {
  open: TimedEvent | null;
  coolUntil: number;
  fired: string[];
}

export function possibleFirings(
  events: TimedEvent[],
  debounceMs: number,
  cooldownMs: number,
): string[][] {
  const sorted = [...events].sort((a, b) => a.at - b.at);
  let states: State[] = [{ open: null, coolUntil: -Infinity, fired: [] }];
  const close = (s: State): State => {
    if (!s.open) return s;
    const firedAt = s.open.at + debounceMs;
    return { open: null, coolUntil: firedAt + cooldownMs, fired: [...s.fired, s.open.eventId] };
  };
  for (const event of sorted) {
    const next: State[] = [];
    for (const state of states) {
      // Close the open window, or not.
      const closings: State[] = [];
      if (!state.open) closings.push(state);
      else {
        const gap = event.at - state.open.at;
        if (gap >= debounceMs - JOIN_TOLERANCE_MS) closings.push(close(state));
        if (gap < debounceMs + JOIN_TOLERANCE_MS) closings.push(state);
      }
      for (const s of closings) {
        // Cooling down: ignored, or not.
        const ignored = event.at < s.coolUntil + COOL_TOLERANCE_MS;
        const taken = event.at >= s.coolUntil - COOL_TOLERANCE_MS;
        if (ignored && !s.open) next.push(s);
        if (taken || s.open) next.push({ ...s, open: event });
      }
    }
    states = dedupe(next);
  }
  return dedupe(states.map(close)).map((s) => s.fired);
}

function dedupe(states: State[]): State[] {
  const seen = new Map<string, State>();
  for (const s of states)
    seen.set(`${s.open?.eventId ?? '-'}|${s.coolUntil}|${s.fired.join(',')}`, s);
  return [...seen.values()];
}
