// Tests of conveyor/shard/index.hpp (placeholder until that header lands).
