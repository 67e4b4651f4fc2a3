// Tests of conveyor/shard/dataset.hpp (placeholder until that header lands).
