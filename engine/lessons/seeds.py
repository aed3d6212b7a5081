"""The write-ups' numbers (../shared/seeds), each with where it is said. The lessons put this
card's measurements beside them; the tests check that each lesson's .md quotes them."""

SEED_000 = "seed 000, 'One RDNA4 verify pass has slack for about two dozen speculative tokens'"
SEED_001 = "seed 001, 'A coding agent's speculative draft is the context it already read back'"
SEED_002 = "seed 002, hipfire /learn 'Speculative decoding on RDNA'"

# seed 000: RX 9070 XT, Qwen3.5-9B
RX9070_DECODE_MS = 25.3          # the decode floor: one token
RX9070_MS_PER_CANDIDATE = 1.04   # compute each candidate adds at the prefill rate
RX9070_KNEE = 24                 # 25.3 / 1.04 ≈ 24 rows ("about two dozen")
RX9070_PASS_24_MS = 25           # 24 tokens confirmed in one pass
RX9070_STEPS_24_MS = 606         # the same 24 tokens as 24 decode steps
RX9070_AR_TOK_S = 39.6
BUDGET_TABLE = (("linear lookup, depth 8", 8), ("linear lookup, depth 24", 24),
                ("token tree, 3 matches x depth 8", 24))

# seed 001: one verification step of prompt lookup, and Leviathan et al.'s expected tokens (the
# formula is engine.cost.acceptance.expected_tokens; these are the write-up's figures from it)
LOOKUP_PROPOSED, LOOKUP_ACCEPTED, LOOKUP_STEPS_AVOIDED = 8, 6, 5
ALPHA_FLAT_UNTIL = 0.5           # "almost flat until acceptance climbs past about 0.5"
GAMMA16_AT_09 = 8                # "at α = 0.9 a block of 16 is worth about 8x"
LOOKUP_SPEEDUP_RANGE = (2, 4)    # prompt lookup's own benchmarks, input-grounded tasks
LOOKUP_AVERAGE_SPEEDUP = 2.4

# seed 002: hipfire 0.4.1 on Flash-Next
HALO_BASE_MS, HALO_MS_PER_ROW = 30.5, 6.9
R9700_BASE_MS, R9700_MS_PER_ROW = 30.3, 14.8
HALO_BREAK_EVEN = (1.23, 1.45, 1.68)      # 1, 2, 3 drafts
R9700_BREAK_EVEN = (1.49, 1.98, 2.47)
MTP_DEFAULT_DEPTH = 3
PRESENCE_PENALTY = 1.5                    # the release's agent evaluations
PENALTY_AR_TOK_S = (33.87, 33.82)         # Strix Halo AR, neutral vs penalized
PENALTY_PROMPTS_IDENTICAL = (24, 24)      # GPU prepass vs host penalties: same IDs on 24 of 24
REJECTION_TRIALS = 200_000                # per case in the CPU test
FLOOR_MAX_PROBES = 3
HALO_AR_TOK_S, HALO_MTP_TOK_S = 33.78, 58.67
R9700_AR_TOK_S, R9700_MTP_TOK_S = 34.92, 40.71

