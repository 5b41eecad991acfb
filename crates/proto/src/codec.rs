//! The protobuf codec of the wire protocol: prost's, except that a
//! message that does not decode is INVALID_ARGUMENT (the caller sent
//! something wrong) rather than prost's INTERNAL, which would read as the
//! server's own failure. Both the generated client and server use it.

use tonic::Status;
use tonic::codec::{BufferSettings, Codec, DecodeBuf, Decoder};
use tonic_prost::{ProstCodec, ProstDecoder, ProstEncoder};

/// See the module docs.
#[derive(Debug, Clone, Default)]
pub struct WireCodec<T, U>(ProstCodec<T, U>);

impl<T, U> Codec for WireCodec<T, U>
where
    T: prost::Message + Send + 'static,
    U: prost::Message + Default + Send + 'static,
{
    type Encode = T;
    type Decode = U;
    type Encoder = ProstEncoder<T>;
    type Decoder = WireDecoder<U>;

    fn encoder(&mut self) -> ProstEncoder<T> {
        self.0.encoder()
    }

    fn decoder(&mut self) -> WireDecoder<U> {
        WireDecoder(self.0.decoder())
    }
}

/// Prost's decoder, with decode failures as INVALID_ARGUMENT.
#[derive(Debug)]
pub struct WireDecoder<U>(ProstDecoder<U>);

impl<U: prost::Message + Default> Decoder for WireDecoder<U> {
    type Item = U;
    type Error = Status;

    fn decode(&mut self, buf: &mut DecodeBuf<'_>) -> Result<Option<U>, Status> {
        self.0.decode(buf).map_err(|s| {
            if s.code() == tonic::Code::Internal {
                Status::invalid_argument(format!("malformed message: {}", s.message()))
            } else {
                s
            }
        })
    }

    fn buffer_settings(&self) -> BufferSettings {
        self.0.buffer_settings()
    }
}
