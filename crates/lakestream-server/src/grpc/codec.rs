//! The protobuf codec of `lakestream.v1`: prost messages, encoded into a buffer reserved at
//! the message's exact size.
//!
//! tonic's prost codec lets the buffer grow as the message is written, which doubles it, and
//! copies it, about a dozen times for a fetch answer of 8 MiB. Reserving `encoded_len` first
//! writes each answer with one copy of its payloads. Decoding is prost's: the payload fields
//! are `bytes::Bytes` (see `build.rs`), sliced out of the received message without a copy.

use std::marker::PhantomData;

use tonic::Status;
use tonic::codec::{BufferSettings, Codec, EncodeBuf, Encoder};

/// The codec the generated `lakestream.v1` server and client use (`codec_path` in `build.rs`).
#[derive(Debug, Clone, Copy)]
pub struct LakestreamCodec<T, U>(PhantomData<(T, U)>);

impl<T, U> Default for LakestreamCodec<T, U> {
    fn default() -> Self {
        LakestreamCodec(PhantomData)
    }
}

impl<T, U> Codec for LakestreamCodec<T, U>
where
    T: prost::Message + Send + 'static,
    U: prost::Message + Default + Send + 'static,
{
    type Encode = T;
    type Decode = U;
    type Encoder = ReservingEncoder<T>;
    type Decoder = tonic_prost::ProstDecoder<U>;

    fn encoder(&mut self) -> Self::Encoder {
        ReservingEncoder(PhantomData)
    }

    fn decoder(&mut self) -> Self::Decoder {
        tonic_prost::ProstDecoder::new(BufferSettings::default())
    }
}

/// Encodes a prost message after reserving its exact encoded length.
#[derive(Debug, Clone, Copy)]
pub struct ReservingEncoder<T>(PhantomData<T>);

impl<T: prost::Message> Encoder for ReservingEncoder<T> {
    type Item = T;
    type Error = Status;

    fn encode(&mut self, item: T, buf: &mut EncodeBuf<'_>) -> Result<(), Status> {
        buf.reserve(item.encoded_len());
        item.encode(buf).map_err(|e| Status::internal(format!("encoding the answer: {e}")))
    }

    fn buffer_settings(&self) -> BufferSettings {
        BufferSettings::default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::grpc::pb;
    use http_body_util::BodyExt as _;
    use prost::Message as _;

    fn answer() -> pb::FetchResponse {
        pb::FetchResponse {
            entries: (0..64u64)
                .map(|i| pb::Entry {
                    offset: i,
                    record_count: 1,
                    timestamp_ms: 1_700_000_000_000 + i as i64,
                    payload: bytes::Bytes::from(vec![i as u8; 65536 + i as usize]),
                })
                .collect(),
            next_offset: 64,
            trim_marker: 0,
        }
    }

    /// What goes on the wire is tonic's message header and prost's encoding, byte for byte.
    #[tokio::test]
    async fn an_answer_goes_on_the_wire_as_prost_encodes_it() {
        let message = answer();
        let encoded = message.encode_to_vec();
        let body = tonic::codec::EncodeBody::new_server(
            ReservingEncoder(PhantomData),
            futures::stream::iter([Ok::<_, Status>(message.clone())]),
            None,
            tonic::codec::SingleMessageCompressionOverride::default(),
            None,
        );
        let wire = body.collect().await.unwrap().to_bytes();
        assert_eq!(wire[0], 0, "not compressed");
        assert_eq!(u32::from_be_bytes(wire[1..5].try_into().unwrap()) as usize, encoded.len());
        assert_eq!(&wire[5..], &encoded[..]);
        assert_eq!(pb::FetchResponse::decode(&wire[5..]).unwrap(), message);
    }
}
