// Tests of conveyor/shard/list.hpp (placeholder until that header lands).
