// Tests of conveyor/shard/order.hpp (placeholder until that header lands).
