"""The built-in English -> Korean corpus: sentence pairs from a small grammar.

Nothing is downloaded: the pairs are generated, deterministically for a seed.
The grammar is small but real, so that a model must learn what a translator
learns:

- word order: English subject-verb-object becomes Korean subject-object-verb,
  and the time adverb moves from the end of the English sentence to the front
  of the Korean one (`"Minsu read a book in the library yesterday."` ->
  `"어제 민수는 도서관에서 책을 읽었다"`);
- particles chosen by whether the noun ends in a final consonant (batchim):
  topic 은/는 for the subject of a transitive verb, subject 이/가 for an
  intransitive one, object 을/를, and 에서 after places;
- tense from the time adverb (yesterday -> past, every day -> present,
  tomorrow -> future), with English agreement (`reads` / `read`);
- negation with 안 before the verb (`공부 안 했다` for noun + 하다 verbs).

The test split holds (subject, verb) combinations that never occur in the
training split, so its score measures generalisation, not memory.
"""

import random

# English subject -> Korean noun. Pronouns take their own subject forms.
PERSONS = {
    "the teacher": "선생님", "the student": "학생", "the doctor": "의사",
    "the child": "아이", "the farmer": "농부", "the cook": "요리사",
    "the singer": "가수", "the nurse": "간호사", "the police officer": "경찰관",
    "my friend": "내 친구", "my mother": "어머니", "my father": "아버지",
    "my grandmother": "할머니", "Minsu": "민수", "Jisoo": "지수", "Junho": "준호",
    "Seoyeon": "서연", "Tom": "톰", "Anna": "안나",
}
ANIMALS = {"the cat": "고양이", "the dog": "개", "the bird": "새", "the rabbit": "토끼"}
PRONOUNS = {  # English -> (Korean noun, subject form with 이/가)
    "I": ("나", "내가"), "you": ("너", "네가"), "we": ("우리", "우리가"),
    "they": ("그들", "그들이"),
}

def _nouns(entries):
    """`"english:korean ..."` -> `{key: (English forms, Korean)}`.

    A plain entry is a countable noun ("a cake", "the cake"; "an" before a
    vowel); `~` marks a mass noun ("bread", "the bread"), `^` one used with
    "the" only ("the news"), `=` one used bare ("English"). Keys are the
    English words in lower case.
    """
    nouns = {}
    for entry in entries.split():
        english, korean = entry.split(":")
        mark, word = (english[0], english[1:]) if english[0] in "~^=" else ("", english)
        forms = {
            "": [("an " if word[0] in "aeiou" else "a ") + word, "the " + word],
            "~": [word, "the " + word],
            "^": ["the " + word],
            "=": [word],
        }[mark]
        nouns[word.lower()] = (forms, korean)
    return nouns


# Objects by category: English forms (with and without an article) -> Korean.
OBJECTS = {
    "food": _nouns("apple:사과 ~bread:빵 ~rice:밥 cake:케이크 ~soup:국 ~noodles:국수 ~kimchi:김치"),
    "drink": _nouns("~water:물 ~milk:우유 ~tea:차 ~coffee:커피 ~juice:주스"),
    "text": _nouns("book:책 newspaper:신문 letter:편지 magazine:잡지 novel:소설 poem:시"),
    "show": _nouns("movie:영화 ^news:뉴스 drama:드라마 game:경기"),
    "thing": _nouns("bag:가방 umbrella:우산 key:열쇠 hat:모자 watch:시계 phone:휴대폰 flower:꽃 "
                    "box:상자"),
    "door": _nouns("^door:문 window:창문"),
    "subject": _nouns("=Korean:한국어 =English:영어 =math:수학 =music:음악 =history:역사"),
    "instrument": _nouns("^piano:피아노 ^guitar:기타 ^drums:드럼"),
    "picture": _nouns("picture:그림 map:지도"),
    "person": {name: ([name], korean) for name, korean in PERSONS.items()},
}
# Things one can make, and things one can open and close, drawn from the above.
OBJECTS["dish"] = {key: OBJECTS["food"][key] for key in ("cake", "bread", "soup", "kimchi")}
OBJECTS["door"].update((key, OBJECTS["thing"][key]) for key in ("box", "bag"))


class Verb:
    """One verb: English forms, Korean forms, and what it takes.

    `korean` holds the present, past and future forms. `negated_split` is set
    for noun + 하다 verbs, whose negation puts 안 between noun and 하다.
    """

    def __init__(self, base, third, past, korean, objects=(), animals=False, preposition="",
                 negated_split=None):
        self.base, self.third, self.past = base, third, past
        self.korean = dict(zip(("present", "past", "future"), korean))
        self.objects = objects
        self.animals = animals
        self.preposition = preposition
        self.negated_split = negated_split

    @property
    def transitive(self):
        return bool(self.objects)

    def english(self, tense, negative, third_person):
        """The English verb group, e.g. `"does not read"`, `"will eat"`."""
        if tense == "future":
            return f"will not {self.base}" if negative else f"will {self.base}"
        if tense == "past":
            return f"did not {self.base}" if negative else self.past
        if negative:
            return f"{'does' if third_person else 'do'} not {self.base}"
        return self.third if third_person else self.base

    def korean_verb(self, tense, negative):
        """The Korean verb group, e.g. `"안 읽었다"`, `"공부 안 할 것이다"`."""
        form = self.korean[tense]
        if not negative:
            return form
        if self.negated_split:
            noun, forms = self.negated_split
            return f"{noun} 안 {dict(zip(('present', 'past', 'future'), forms))[tense]}"
        return f"안 {form}"


HADA = ("한다", "했다", "할 것이다")
VERBS = {
    "eat": Verb("eat", "eats", "ate", ("먹는다", "먹었다", "먹을 것이다"), ("food",),
                animals=True),
    "drink": Verb("drink", "drinks", "drank", ("마신다", "마셨다", "마실 것이다"), ("drink",),
                  animals=True),
    "read": Verb("read", "reads", "read", ("읽는다", "읽었다", "읽을 것이다"), ("text",)),
    "write": Verb("write", "writes", "wrote", ("쓴다", "썼다", "쓸 것이다"), ("text",)),
    "watch": Verb("watch", "watches", "watched", ("본다", "봤다", "볼 것이다"), ("show",)),
    "buy": Verb("buy", "buys", "bought", ("산다", "샀다", "살 것이다"),
                ("food", "drink", "text", "thing")),
    "sell": Verb("sell", "sells", "sold", ("판다", "팔았다", "팔 것이다"),
                 ("food", "drink", "thing")),
    "find": Verb("find", "finds", "found", ("찾는다", "찾았다", "찾을 것이다"),
                 ("thing", "text")),
    "make": Verb("make", "makes", "made", ("만든다", "만들었다", "만들 것이다"),
                 ("dish", "picture")),
    "learn": Verb("learn", "learns", "learned", ("배운다", "배웠다", "배울 것이다"),
                  ("subject", "instrument")),
    "teach": Verb("teach", "teaches", "taught", ("가르친다", "가르쳤다", "가르칠 것이다"),
                  ("subject", "instrument")),
    "like": Verb("like", "likes", "liked", ("좋아한다", "좋아했다", "좋아할 것이다"),
                 ("food", "drink", "show", "subject", "person")),
    "open": Verb("open", "opens", "opened", ("연다", "열었다", "열 것이다"), ("door",)),
    "close": Verb("close", "closes", "closed", ("닫는다", "닫았다", "닫을 것이다"), ("door",)),
    "draw": Verb("draw", "draws", "drew", ("그린다", "그렸다", "그릴 것이다"), ("picture",)),
    "play_instrument": Verb("play", "plays", "played", ("친다", "쳤다", "칠 것이다"),
                            ("instrument",)),
    "meet": Verb("meet", "meets", "met", ("만난다", "만났다", "만날 것이다"), ("person",)),
    "help": Verb("help", "helps", "helped", ("돕는다", "도왔다", "도울 것이다"), ("person",)),
    "wait": Verb("wait", "waits", "waited", ("기다린다", "기다렸다", "기다릴 것이다"),
                 ("person",), preposition="for"),
    "sleep": Verb("sleep", "sleeps", "slept", ("잔다", "잤다", "잘 것이다"), animals=True),
    "laugh": Verb("laugh", "laughs", "laughed", ("웃는다", "웃었다", "웃을 것이다")),
    "cry": Verb("cry", "cries", "cried", ("운다", "울었다", "울 것이다"), animals=True),
    "run": Verb("run", "runs", "ran", ("달린다", "달렸다", "달릴 것이다"), animals=True),
    "walk": Verb("walk", "walks", "walked", ("걷는다", "걸었다", "걸을 것이다"), animals=True),
    "rest": Verb("rest", "rests", "rested", ("쉰다", "쉬었다", "쉴 것이다"), animals=True),
    "play": Verb("play", "plays", "played", ("논다", "놀았다", "놀 것이다"), animals=True),
    "sing": Verb("sing", "sings", "sang", ("노래한다", "노래했다", "노래할 것이다"),
                 negated_split=("노래", HADA)),
    "work": Verb("work", "works", "worked", ("일한다", "일했다", "일할 것이다"),
                 negated_split=("일", HADA)),
    "study": Verb("study", "studies", "studied", ("공부한다", "공부했다", "공부할 것이다"),
                  negated_split=("공부", HADA)),
    "cook": Verb("cook", "cooks", "cooked", ("요리한다", "요리했다", "요리할 것이다"),
                 negated_split=("요리", HADA)),
    "swim": Verb("swim", "swims", "swam", ("수영한다", "수영했다", "수영할 것이다"),
                 animals=True, negated_split=("수영", HADA)),
    "dance": Verb("dance", "dances", "danced", ("춤춘다", "춤췄다", "춤출 것이다"),
                  negated_split=("춤", ("춘다", "췄다", "출 것이다"))),
}

PLACES = {
    "in the library": "도서관", "at school": "학교", "in the park": "공원",
    "at home": "집", "in the kitchen": "부엌", "at the market": "시장",
    "in the garden": "정원", "at the office": "사무실", "in the classroom": "교실",
    "at the station": "역", "in the restaurant": "식당", "at the beach": "바닷가",
    "in the cafe": "카페", "at the hospital": "병원",
}
TIMES = {  # English -> (Korean, tense)
    "yesterday": ("어제", "past"), "last night": ("어젯밤에", "past"),
    "last week": ("지난주에", "past"), "last year": ("작년에", "past"),
    "every day": ("매일", "present"), "every morning": ("매일 아침", "present"),
    "on weekends": ("주말마다", "present"), "often": ("자주", "present"),
    "tomorrow": ("내일", "future"), "next week": ("다음 주에", "future"),
    "next year": ("내년에", "future"), "tonight": ("오늘 밤에", "future"),
}
SPLITS = ("train", "valid", "test")


def has_final_consonant(word):
    """Whether the last syllable of a Korean word ends in a consonant (batchim)."""
    code = ord(word[-1]) - 0xAC00
    return 0 <= code < 11172 and code % 28 != 0


def particle(noun, role):
    """`noun` with its particle: role `"topic"` (은/는), `"subject"` (이/가), `"object"` (을/를)."""
    with_consonant, without = {"topic": ("은", "는"), "subject": ("이", "가"),
                               "object": ("을", "를")}[role]
    return noun + (with_consonant if has_final_consonant(noun) else without)


def _subjects(verb):
    """(English, Korean noun, Korean subject form or None, third person) for a verb."""
    subjects = [(en, ko, None, True) for en, ko in PERSONS.items()]
    subjects += [(en, ko, form, False) for en, (ko, form) in PRONOUNS.items()]
    if verb.animals:
        subjects += [(en, ko, None, True) for en, ko in ANIMALS.items()]
    return subjects


def _combinations():
    """Every (subject, verb) pair the grammar allows, in a fixed order."""
    return [(subject[0], name) for name, verb in VERBS.items() for subject in _subjects(verb)]


def held_out_combinations(seed=0, fraction=0.1):
    """(subject, verb) pairs reserved for the valid and test splits.

    At most one pair per subject and per verb is held out, so every word is
    still seen in training. Returns a dict `{"valid": set, "test": set}`.
    """
    rng = random.Random(seed)
    pairs = _combinations()
    rng.shuffle(pairs)
    wanted = int(len(pairs) * fraction)
    held, used_subjects, used_verbs = [], set(), set()
    for subject, verb in pairs:
        if subject in used_subjects or verb in used_verbs:
            continue
        held.append((subject, verb))
        used_subjects.add(subject)
        used_verbs.add(verb)
        if len(held) == wanted:
            break
    return {"valid": set(held[::2]), "test": set(held[1::2])}


def _sentence(rng, subject, verb_name):
    """One (English, Korean) pair for a given subject and verb."""
    verb = VERBS[verb_name]
    en_subject, ko_subject, ko_subject_form, third_person = next(
        entry for entry in _subjects(verb) if entry[0] == subject
    )
    time = rng.choice(list(TIMES)) if rng.random() < 0.75 else None
    tense = TIMES[time][1] if time else "present"
    negative = rng.random() < 0.3
    place = rng.choice(list(PLACES)) if rng.random() < 0.5 else None

    english = [en_subject, verb.english(tense, negative, third_person)]
    korean = [TIMES[time][0]] if time else []
    if verb.transitive:
        korean.append(particle(ko_subject, "topic"))
    else:
        korean.append(ko_subject_form or particle(ko_subject, "subject"))
    if place:
        korean.append(PLACES[place] + "에서")
    if verb.transitive:
        category = rng.choice(verb.objects)
        choices = [key for key in OBJECTS[category] if key != subject]
        en_forms, ko_object = OBJECTS[category][rng.choice(choices)]
        if verb.preposition:
            english.append(verb.preposition)
        english.append(rng.choice(en_forms))
        korean.append(particle(ko_object, "object"))
    korean.append(verb.korean_verb(tense, negative))
    english += [place] if place else []
    english += [time] if time else []
    sentence = " ".join(english)
    return sentence[0].upper() + sentence[1:] + ".", " ".join(korean)


def english_korean_corpus(train_size=20000, valid_size=500, test_size=1000, seed=0):
    """Generate the built-in English -> Korean corpus.

    Args:
        train_size: int. Pairs in the training split. Defaults to `20000`.
        valid_size: int. Pairs in the validation split. Defaults to `500`.
        test_size: int. Pairs in the test split. Defaults to `1000`.
        seed: int. Same seed, same corpus. Defaults to `0`.

    Returns:
        dict `{"train": [(english, korean), ...], "valid": [...], "test": [...]}`.
        The splits share no sentence, and the (subject, verb) pairs of
        "valid" and "test" (disjoint from each other) never occur in "train".

    Example:

    >>> corpus = english_korean_corpus(train_size=3, valid_size=1, test_size=1)
    >>> [len(corpus[split]) for split in ("train", "valid", "test")]
    [3, 1, 1]
    """
    for name, value in (("train_size", train_size), ("valid_size", valid_size),
                        ("test_size", test_size)):
        if not isinstance(value, int) or value < 0:
            raise ValueError(
                f"Received an invalid value for argument `{name}`, expected a "
                f"non-negative integer. Received: {name}={value!r}"
            )
    held = held_out_combinations(seed)
    seen_pairs = [pair for pair in _combinations() if pair not in held["valid"] | held["test"]]
    pools = {"train": seen_pairs, "valid": sorted(held["valid"]), "test": sorted(held["test"])}
    sizes = {"train": train_size, "valid": valid_size, "test": test_size}
    rng = random.Random(seed)
    corpus, used = {}, set()
    for split in SPLITS:
        pairs = []
        while len(pairs) < sizes[split]:
            pair = _sentence(rng, *rng.choice(pools[split]))
            if pair[0] not in used:
                used.add(pair[0])
                pairs.append(pair)
        corpus[split] = pairs
    return corpus
