// Tests of conveyor/shard/untar.hpp (placeholder until that header lands).
