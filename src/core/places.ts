/** At most `limit` holders at once; others wait in order, at most `maxWaiting` of them. */
export class Places {
  private held = 0;
  private readonly waiting: (() => void)[] = [];

  constructor(
    private readonly limit: number,
    private readonly maxWaiting: number,
  ) {}

  get idle(): boolean {
    return this.held === 0 && this.waiting.length === 0;
  }

  /** Resolves once a place is held; undefined (nothing held, nothing queued) when too many wait already. */
  take(): Promise<void> | undefined {
    if (this.held < this.limit) {
      this.held++;
      return Promise.resolve();
    }
    if (this.waiting.length >= this.maxWaiting) return undefined;
    return new Promise((resolve) => this.waiting.push(resolve));
  }

  /** Gives a held place back: to the first waiting, if any. */
  give(): void {
    const next = this.waiting.shift();
    if (next) next();
    else this.held--;
  }
}

/** Places by key (a source address, a workspace), each key's forgotten once idle. */
export class PlacesByKey {
  private readonly byKey = new Map<string, Places>();

  constructor(
    private readonly limit: number,
    private readonly maxWaiting: number,
  ) {}

  /** Resolves with the release once a place of `key` is held; undefined when too many of `key` wait already. */
  take(key: string): Promise<() => void> | undefined {
    let places = this.byKey.get(key);
    if (!places) {
      places = new Places(this.limit, this.maxWaiting);
      this.byKey.set(key, places);
    }
    const turn = places.take();
    if (!turn) return undefined;
    const mine = places;
    return turn.then(() => {
      let given = false;
      return () => {
        if (given) return;
        given = true;
        mine.give();
        if (mine.idle && this.byKey.get(key) === mine) this.byKey.delete(key);
      };
    });
  }
}
