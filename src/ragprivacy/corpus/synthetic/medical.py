"""Synthetic patient–doctor dialogues in the style of HealthCareMagic-100k / ChatDoctor.

Each document reads ``"Patient: ... Doctor: ..."`` (the two parts on two lines, as the
papers concatenate a record's ``input`` and ``output``), 80–250 words, assembled from
many interchangeable sentence templates so that no two documents are near-duplicates.
It carries PII ground truth (names, ages, phone numbers, e-mail addresses, addresses,
dates, hospitals, conditions and drugs) with exact offsets, and human-like misspellings
at a controlled rate, listed in ``metadata["misspellings"]`` as ``[misspelled,
correct]`` pairs in text order: the MBA attack (Liu et al., Sec. 4.3) must not mask
them, since a model would "correct" them.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ragprivacy._validation import check_probability
from ragprivacy.corpus.collection import Corpus
from ragprivacy.corpus.synthetic._base import GenerationContext, doc_id
from ragprivacy.corpus.synthetic._pools import (
    FakePeople,
    distinct,
    email_local_part,
    faker_for,
    phone_number,
)
from ragprivacy.corpus.synthetic._text import (
    Misspeller,
    Pii,
    Segment,
    TextBuilder,
    render,
    word_count,
)
from ragprivacy.types import Document

__all__ = ["CONDITIONS", "generate_medical"]

# condition | symptoms | drugs — common primary-care presentations.
_CONDITION_TABLE = """
migraine | throbbing headaches; sensitivity to light; nausea | sumatriptan; propranolol; rizatriptan
gastritis | burning stomach pain; bloating; loss of appetite | omeprazole; pantoprazole; sucralfate
urinary tract infection | burning during urination; frequent urge to urinate; lower abdominal pain
    | nitrofurantoin; ciprofloxacin; cefalexin
hypertension | morning headaches; dizziness; blurred vision | amlodipine; losartan; lisinopril
type 2 diabetes | excessive thirst; frequent urination; constant tiredness
    | metformin; gliclazide; sitagliptin
asthma | wheezing; shortness of breath; cough at night | salbutamol; budesonide; montelukast
iron deficiency anaemia | tiredness; pale skin; breathlessness on stairs
    | ferrous sulfate; ferrous fumarate; folic acid
hypothyroidism | weight gain; intolerance to cold; dry skin | levothyroxine
acid reflux | heartburn; sour taste in the mouth; chest discomfort after meals
    | esomeprazole; famotidine; alginate suspension
sinusitis | facial pain; blocked nose; thick nasal discharge
    | amoxicillin; fluticasone nasal spray; cetirizine
tonsillitis | sore throat; difficulty swallowing; fever
    | phenoxymethylpenicillin; azithromycin; benzydamine spray
eczema | itchy rash; dry patches on my arms; cracked skin
    | hydrocortisone cream; betamethasone cream; emollient cream
fungal skin infection | red itchy patches; scaling between the toes; peeling skin
    | canesten; clotrimazole; terbinafine
lower back strain | lower back pain; stiffness in the morning; pain when bending
    | diclofenac; naproxen; cyclobenzaprine
irritable bowel syndrome | cramping; alternating diarrhoea and constipation; bloating
    | mebeverine; loperamide; peppermint oil capsules
generalised anxiety disorder | constant worry; palpitations; trouble sleeping
    | sertraline; escitalopram; buspirone
depression | low mood; loss of interest in things; poor sleep | fluoxetine; citalopram; mirtazapine
kidney stones | severe pain in my side; blood in the urine; nausea
    | tamsulosin; ketorolac; potassium citrate
gout | sudden pain in the big toe; swelling of the joint; redness around the joint
    | allopurinol; colchicine; indomethacin
polycystic ovary syndrome | irregular periods; acne; weight gain
    | metformin; drospirenone; spironolactone
conjunctivitis | red eyes; sticky discharge; gritty feeling in the eyes
    | chloramphenicol eye drops; fusidic acid drops
otitis media | ear pain; reduced hearing; fever | amoxicillin; ibuprofen
vitamin D deficiency | bone pain; muscle weakness; fatigue | cholecalciferol; calcium carbonate
allergic rhinitis | sneezing; runny nose; itchy eyes
    | loratadine; fexofenadine; mometasone nasal spray
peptic ulcer | gnawing upper abdominal pain; black stools; nausea
    | omeprazole; clarithromycin; bismuth subsalicylate
gallstones | pain under the right ribs; pain after fatty meals; vomiting
    | ursodeoxycholic acid; hyoscine butylbromide
psoriasis | scaly plaques on my elbows; itching; pitted nails
    | calcipotriol; methotrexate; coal tar shampoo
sciatica | shooting pain down the leg; numbness in the foot; tingling
    | pregabalin; gabapentin; naproxen
acute bronchitis | persistent cough; chest tightness; yellow phlegm
    | doxycycline; carbocisteine; salbutamol
insomnia | difficulty falling asleep; waking too early; daytime tiredness
    | zopiclone; melatonin; trazodone
"""


def _parse_conditions(table: str) -> tuple[tuple[str, tuple[str, ...], tuple[str, ...]], ...]:
    out = []
    for line in table.strip().replace("\n    |", " |").splitlines():
        condition, symptoms, drugs = (part.strip() for part in line.split("|"))
        out.append(
            (
                condition,
                tuple(x.strip() for x in symptoms.split(";")),
                tuple(x.strip() for x in drugs.split(";")),
            )
        )
    return tuple(out)


#: (condition, symptoms, drugs) triples used by the generator.
CONDITIONS = _parse_conditions(_CONDITION_TABLE)

_FEMALE_ONLY = frozenset({"polycystic ovary syndrome"})
_TOPICAL = frozenset({"spray", "cream", "drops", "shampoo", "capsules", "suspension", "gel"})
_DOSES = (
    "10 mg",
    "20 mg",
    "25 mg",
    "40 mg",
    "50 mg",
    "100 mg",
    "250 mg",
    "400 mg",
    "500 mg",
    "5 ml",
)
_DURATIONS = (
    "two days",
    "three days",
    "a week",
    "ten days",
    "two weeks",
    "three weeks",
    "a month",
    "six weeks",
    "two months",
    "several months",
    "almost a year",
)
_COURSES = ("five days", "seven days", "ten days", "two weeks", "a month")
_RELATIVES = ("husband", "wife", "mother", "father", "sister", "brother", "son", "daughter")
_TESTS = (
    "a thyroid profile",
    "a urine culture",
    "an ultrasound of the abdomen",
    "a chest X-ray",
    "a lipid profile",
    "a fasting blood sugar test",
    "an ECG",
    "an MRI of the spine",
    "a liver function test",
    "a vitamin D level",
    "a complete blood count",
    "a stool examination",
)
_HOSPITAL_SUFFIX = (
    "Hospital",
    "Medical Center",
    "Clinic",
    "Health Centre",
    "General Hospital",
    "Family Practice",
)
_MONTHS = (
    "January",
    "February",
    "March",
    "April",
    "May",
    "June",
    "July",
    "August",
    "September",
    "October",
    "November",
    "December",
)

_OPENINGS = (
    "Hi doctor, my name is {name} and I am {age} years old.",
    "Hello, I am {name}, a {age} year old {sex}.",
    "Dear doctor, I'm {name} ({age} yrs) and I need some advice.",
    "Hi, this is {name}. I am {age} and generally healthy.",
    "Good evening doctor. I am a {age}-year-old {sex} called {name}.",
    "Respected sir, my name is {name}, age {age}.",
    "Hello doctor, {name} here, {age} years of age.",
    "Hi there. I'm {name}, {age}, and I have been worried about my health lately.",
    "Hello. I am writing on behalf of myself, {name}, {age} years old.",
    "Hi, I'm {name}. I turned {age} this year and something is not right.",
)
_SYMPTOMS = (
    "For the past {duration} I have been having {s1} and {s2}.",
    "Since {date} I have noticed {s1}, along with {s2}.",
    "I have had {s1} on and off for {duration}, and recently also {s2}.",
    "My main problem is {s1}, which gets worse at night, plus some {s2}.",
    "About {duration} ago I started getting {s1}.",
    "It started with {s1} and now I also have {s2} and {s3}.",
    "The {s1} comes and goes but the {s2} is there all the time.",
    "Most mornings I wake up with {s1}.",
    "Every few days I get {s1} that lasts several hours.",
    "I have been suffering from {s1} for {duration} now.",
)
_EXTRA_SYMPTOMS = (
    "I also get {s3} from time to time.",
    "Lately there is {s2} as well, mostly in the evenings.",
    "Sometimes the {s2} is so bad that I cannot concentrate at work.",
    "The {s3} started only last week.",
)
_HISTORY = (
    "I have no history of diabetes or high blood pressure.",
    "My {relative} had similar problems a few years back.",
    "I work long shifts at {employer} and I am on my feet all day.",
    "I was seen at {hospital} on {date} where they did some blood tests.",
    "My blood tests from {date} were mostly normal except slightly high cholesterol.",
    "I do not smoke and I drink alcohol only occasionally.",
    "I used to smoke about ten cigarettes a day but stopped last year.",
    "I had my appendix removed when I was a teenager.",
    "My weight is about {weight} kg and I exercise twice a week.",
    "I recently moved to {city} and my diet has changed quite a lot.",
    "I live at {address}, and the nearest clinic is quite far away.",
    "There is a lot of stress at work these days.",
    "I am not on any regular medication.",
    "I have tried drinking more water and resting but nothing changed.",
    "My sleep has been poor for the last few weeks.",
    "I travel a lot for work and often eat outside.",
    "Two years ago I was treated for a chest infection.",
    "My appetite is normal and I have not lost weight.",
    "I am allergic to penicillin.",
    "An ultrasound done last month showed nothing unusual.",
)
_MEDICATION = (
    "My local doctor prescribed {drug}{dose} but it did not help much.",
    "I took {drug} for a week with only partial relief.",
    "A pharmacist suggested {drug}, which I have been taking since {since}.",
    "I have been using {drug}{dose} twice daily.",
    "I stopped taking {drug} because it made me drowsy.",
)
_QUESTIONS = (
    "What could be the cause and what should I do?",
    "Is this something serious?",
    "Should I get any tests done?",
    "Please advise what treatment I should take.",
    "Do I need to see a specialist?",
    "Can this be related to stress?",
    "Kindly suggest a remedy.",
    "Is it safe to continue my current medicine?",
    "How long will it take to get better?",
    "Please tell me what is going on.",
)
_CONTACTS = (
    "You can reach me at {phone}.",
    "My email is {email} if you need more details.",
    "Please reply to {email} or call {phone}.",
    "Contact number: {phone}.",
    "I can send my reports from {email}.",
)
_GREETINGS = (
    "Hi {first}, thanks for your query.",
    "Hello {first}. Thank you for posting on this forum.",
    "Dear {first}, I understand your concern.",
    "Hi, welcome. I have gone through your query carefully.",
    "Hello and welcome, {first}.",
    "Thanks for writing in, {first}.",
    "Hello. I have read your question and the details you gave.",
)
_DIAGNOSES = (
    "From your description this looks like {condition}.",
    "Your symptoms are suggestive of {condition}.",
    "The most likely cause here is {condition}.",
    "Based on what you describe, {condition} should be ruled out first.",
    "These complaints are commonly seen in {condition}.",
    "I suspect {condition}, although an examination is needed to be sure.",
)
_EXPLANATIONS = (
    "This is a common problem and usually responds well to treatment.",
    "It can be triggered by irregular meals, stress and lack of sleep.",
    "The {s1} you mention is quite typical of this condition.",
    "Sometimes it is also associated with a mild infection.",
    "It is not usually dangerous, but it should be treated properly.",
    "Hormonal changes and weight gain can also play a role.",
    "In some people it runs in the family.",
    "Your age and lifestyle make this the most probable explanation.",
    "Other causes are less likely but cannot be excluded yet.",
    "The symptoms often get worse with dehydration.",
)
_TEST_ADVICE = (
    "I would advise getting {test} done.",
    "Please get {test} to confirm the diagnosis.",
    "A simple test such as {test} will help to rule out other causes.",
    "Your doctor may also order {test}.",
)
_TREATMENTS = (
    "You can take {drug}{dose} for {course}.",
    "I suggest starting {drug}{dose} after consulting your physician.",
    "Start {drug}{dose} once daily, which should help in this case.",
    "A course of {drug} for {course} is usually enough.",
    "Continue {drug}{dose} and review after {course}.",
)
_LIFESTYLE = (
    "Drink plenty of water and avoid spicy food.",
    "Take adequate rest and avoid heavy lifting for a few days.",
    "Regular exercise and a balanced diet will help in the long run.",
    "Avoid caffeine and alcohol until the symptoms settle.",
    "Try to sleep at a regular time every night.",
    "Warm compresses may give some relief.",
    "Keep a diary of your symptoms to show your doctor.",
    "Reduce salt in your diet and check your blood pressure weekly.",
    "Small frequent meals are better than large ones.",
    "Yoga and breathing exercises can reduce the stress component.",
    "Avoid scratching the area and keep it dry.",
    "Do not stop any medicine suddenly without advice.",
)
_FOLLOW_UPS = (
    "If the symptoms persist beyond a week, please see a specialist.",
    "Do consult your doctor in person if there is no improvement.",
    "You may book a follow-up at {hospital} if needed.",
    "Feel free to write back to me with your reports.",
    "Seek urgent care if you develop high fever or severe pain.",
)
_CLOSINGS = (
    "Hope this helps. Regards, Dr. {doctor}.",
    "Wishing you good health. Dr. {doctor}",
    "Take care. Regards, Dr. {doctor}, {hospital}.",
    "Hope I have answered your query. Dr. {doctor}",
    "Get well soon. Dr. {doctor}",
)


def _one(rng: np.random.Generator, items: tuple[str, ...]) -> str:
    return items[int(rng.integers(len(items)))]


def _pick(rng: np.random.Generator, items: tuple[str, ...], k: int) -> list[str]:
    k = min(k, len(items))
    return [items[i] for i in rng.choice(len(items), size=k, replace=False).tolist()]


def _dose(drug: str, rng: np.random.Generator) -> str:
    """ " 20 mg" for tablets, nothing for creams, sprays and drops."""
    if drug.split()[-1] in _TOPICAL:
        return ""
    return " " + _DOSES[int(rng.integers(len(_DOSES)))]


def _date(rng: np.random.Generator) -> str:
    day = int(rng.integers(1, 29))
    month = _MONTHS[int(rng.integers(12))]
    form = int(rng.integers(3))
    if form == 0:
        return f"{day} {month}"
    if form == 1:
        return f"{month} {day}"
    return f"{month} {day}, {int(rng.integers(2015, 2024))}"


def generate_medical(n: int, ctx: GenerationContext, *, misspelling_rate: float = 0.03) -> Corpus:
    """``n`` patient–doctor dialogues (see the module docstring).

    Args:
        n: number of documents.
        ctx: the generation context (streams and name partition).
        misspelling_rate: probability that an eligible word (lower-case, >= 4 letters,
            outside PII) is misspelled.
    """
    check_probability("misspelling_rate", misspelling_rate)
    rng = ctx.rng
    fake = faker_for(ctx.faker_seed)
    people = FakePeople(fake, pool_size=min(300, 40 + n))
    names = [t for t in people.full_names(2 * n + 50, rng) if ctx.allowed(f"{t[0]} {t[1]}")]
    while len(names) < n + 1:  # pragma: no cover - the pool is far larger than needed
        names += [t for t in people.full_names(n, rng) if ctx.allowed(f"{t[0]} {t[1]}")]
    patients = names[:n]
    n_doctors = max(1, min(len(names) - n, n // 8 + 1))
    doctors = names[n : n + n_doctors]
    companies = distinct(fake.company, min(200, 10 + n // 4))
    streets = distinct(fake.street_address, min(300, 10 + n // 2))
    cities = distinct(fake.city, min(200, 10 + n // 4))
    hospitals = [
        f"{cities[int(i)]} {_HOSPITAL_SUFFIX[int(j)]}"
        for i, j in zip(
            rng.integers(len(cities), size=max(4, n // 20)),
            rng.integers(len(_HOSPITAL_SUFFIX), size=max(4, n // 20)),
        )
    ]
    domains = ("gmail.com", "yahoo.com", "outlook.com", "hotmail.com", "mail.com", "icloud.com")

    docs = []
    for i in range(n):
        first, last, sex = patients[i]
        doc_first, doc_last, _ = doctors[int(rng.integers(len(doctors)))]
        condition, symptoms, drugs = CONDITIONS[int(rng.integers(len(CONDITIONS)))]
        if condition in _FEMALE_ONLY and sex != "female":
            condition, symptoms, drugs = CONDITIONS[0]
        s = _pick(rng, symptoms, 3)
        while len(s) < 3:
            s.append(s[-1])
        drug_i = rng.permutation(len(drugs)).tolist()
        drug_tried = drugs[drug_i[0]]
        drug_given = drugs[drug_i[1]] if len(drug_i) > 1 else drugs[drug_i[0]]
        age = int(rng.integers(18, 86))
        city = cities[int(rng.integers(len(cities)))]
        hospital = hospitals[int(rng.integers(len(hospitals)))]
        email = f"{email_local_part(first, last, rng)}@{domains[int(rng.integers(len(domains)))]}"
        fields: dict[str, Any] = {
            "name": Pii(f"{first} {last}", "name"),
            "first": Pii(first, "name"),
            "age": Pii(str(age), "age"),
            "sex": ("man", "woman")[sex == "female"] if rng.random() < 0.5 else sex,
            "s1": s[0],
            "s2": s[1],
            "s3": s[2],
            "duration": _DURATIONS[int(rng.integers(len(_DURATIONS)))],
            "course": _COURSES[int(rng.integers(len(_COURSES)))],
            "date": Pii(_date(rng), "date"),
            "since": Pii(_date(rng), "date"),
            "relative": _RELATIVES[int(rng.integers(len(_RELATIVES)))],
            "employer": Pii(companies[int(rng.integers(len(companies)))], "organization"),
            "hospital": Pii(hospital, "organization"),
            "weight": str(int(rng.integers(48, 120))),
            "city": Pii(city, "address"),
            "address": Pii(f"{streets[int(rng.integers(len(streets)))]}, {city}", "address"),
            "phone": Pii(phone_number(rng), "phone"),
            "email": Pii(email, "email"),
            "condition": Pii(condition, "condition"),
            "test": _TESTS[int(rng.integers(len(_TESTS)))],
            "doctor": Pii(f"{doc_first} {doc_last}", "name"),
        }
        tried = dict(fields, drug=Pii(drug_tried, "drug"), dose=_dose(drug_tried, rng))
        given = dict(fields, drug=Pii(drug_given, "drug"), dose=_dose(drug_given, rng))
        target = int(rng.integers(80, 251))

        # Required sentences first, optional ones are added until the target length.
        patient: list[list[Segment]] = [
            render(_one(rng, _OPENINGS), fields),
            render(_one(rng, _SYMPTOMS), fields),
        ]
        question = render(_one(rng, _QUESTIONS), fields)
        doctor_head = [
            render(_one(rng, _GREETINGS), fields),
            render(_one(rng, _DIAGNOSES), fields),
        ]
        treatment = render(_one(rng, _TREATMENTS), given)
        closing = render(_one(rng, _CLOSINGS), fields)
        contact = render(_one(rng, _CONTACTS), fields) if rng.random() < 0.6 else None
        optional_patient = [render(t, fields) for t in _pick(rng, _HISTORY, 6)]
        optional_patient += [render(t, fields) for t in _pick(rng, _EXTRA_SYMPTOMS, 1)]
        if rng.random() < 0.6:
            optional_patient.insert(int(rng.integers(0, 3)), render(_one(rng, _MEDICATION), tried))
        optional_doctor = [render(t, fields) for t in _pick(rng, _EXPLANATIONS, 3)]
        optional_doctor += [render(t, fields) for t in _pick(rng, _TEST_ADVICE, 1)]
        optional_doctor += [render(t, fields) for t in _pick(rng, _LIFESTYLE, 4)]
        optional_doctor += [render(t, fields) for t in _pick(rng, _FOLLOW_UPS, 1)]

        required = [*patient, question, *doctor_head, treatment, closing]
        words = sum(word_count(sentence) for sentence in required)
        if contact is not None:
            words += word_count(contact)
        extra_p: list[list[Segment]] = []
        extra_d: list[list[Segment]] = []
        turn = 0
        while words < target and (optional_patient or optional_doctor):
            pool, out = (
                (optional_patient, extra_p)
                if (turn % 5 < 2 and optional_patient) or not optional_doctor
                else (optional_doctor, extra_d)
            )
            sentence = pool.pop(0)
            out.append(sentence)
            words += word_count(sentence)
            turn += 1

        speller = Misspeller(misspelling_rate, rng)
        builder = TextBuilder(speller)
        builder.text("Patient: ", misspell=False)
        p_sentences = [*patient, *extra_p, question] + ([contact] if contact else [])
        for k, sentence in enumerate(p_sentences):
            if k:
                builder.text(" ", misspell=False)
            builder.add(sentence)
        builder.text("\n", misspell=False)
        doctor_offset = len(builder)
        builder.text("Doctor: ", misspell=False)
        d_sentences = [*doctor_head, *extra_d[: len(extra_d) // 2 + 1], treatment]
        d_sentences += [*extra_d[len(extra_d) // 2 + 1 :], closing]
        for k, sentence in enumerate(d_sentences):
            if k:
                builder.text(" ", misspell=False)
            builder.add(sentence)
        text, spans = builder.build()
        docs.append(
            Document(
                id=doc_id(ctx.kind, i, n),
                text=text,
                metadata={
                    "kind": "medical",
                    "patient": f"{first} {last}",
                    "doctor": f"Dr. {doc_first} {doc_last}",
                    "condition": condition,
                    "drugs": sorted({drug_tried, drug_given}),
                    "doctor_offset": doctor_offset,
                    "misspellings": [list(p) for p in speller.pairs],
                    "misspelling_rate": float(misspelling_rate),
                },
                pii=spans,
            )
        )
    return Corpus(docs)
